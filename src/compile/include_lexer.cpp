#include "include_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <unordered_map>

namespace progcache::detail {

namespace {

// A character of an identifier or a number as gcc reads them: letters,
// digits, '_', '$' and any byte of a UTF-8 sequence.
bool is_ident(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) != 0 || c == '_' || c == '$' || u >= 0x80;
}

// The longest operand text a computed include keeps: it names a macro (or
// a few tokens), and a line of thousands of __has_include( must not cost
// a copy of the rest of the line each.
constexpr std::size_t k_max_computed = 256;

// White space inside a line as the preprocessor takes it: gcc also takes a
// NUL for white space (warning "null character(s) ignored").
bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r' || c == '\0';
}

std::size_t skip_blanks(std::string_view s, std::size_t i) {
  while (i < s.size() && blank(s[i])) ++i;
  return i;
}

// Where `l` (a logical line) is a directive: just past its '#' (or '%:')
// and the white space after it; npos where it is none.
std::size_t directive_name_at(std::string_view l) {
  std::size_t i = skip_blanks(l, 0);
  if (i < l.size() && l[i] == '#') {
    ++i;
  } else if (l.substr(i).starts_with("%:")) {
    i += 2;
  } else {
    return std::string_view::npos;
  }
  return skip_blanks(l, i);
}

// Whether a header name ("a.h" or <a.h>) may come next after `so_far`, the
// start of a logical line: in an #include, #include_next or #import
// directive, or as the operand of __has_include. There the preprocessor
// reads it whole, as a header name: a "/*" or a backslash inside is part of
// the name, not a comment or an escape.
bool header_name_next(std::string_view so_far) {
  std::size_t end = so_far.size();
  while (end > 0 && blank(so_far[end - 1])) --end;
  std::string_view t = so_far.substr(0, end);
  if (t.ends_with("(")) {
    t.remove_suffix(1);
    while (!t.empty() && blank(t.back())) t.remove_suffix(1);
    for (const std::string_view name : {"__has_include", "__has_include_next"}) {
      if (t.ends_with(name) && (t.size() == name.size() || !is_ident(t[t.size() - name.size() - 1]))) return true;
    }
    return false;
  }
  // The tail first: the whole line is looked at once per such word.
  if (!t.ends_with("include") && !t.ends_with("include_next") && !t.ends_with("import")) return false;
  const std::size_t i = directive_name_at(t);
  if (i == std::string_view::npos) return false;
  const std::string_view word = t.substr(i);
  return word == "include" || word == "include_next" || word == "import";
}

// Reads the operand at `s[i]`: "name", <name>, or anything else (computed).
Directive read_operand(std::string_view s, std::size_t i, int line) {
  i = skip_blanks(s, i);
  if (i < s.size() && (s[i] == '"' || s[i] == '<')) {
    const char close = s[i] == '"' ? '"' : '>';
    const std::size_t end = s.find(close, i + 1);
    if (end != std::string_view::npos) {
      return {s[i] == '"' ? Operand::quoted : Operand::angled, std::string(s.substr(i + 1, end - i - 1)), line};
    }
  }
  return {Operand::computed, std::string(s.substr(i, k_max_computed)), line};
}

// A logical line, as the preprocessor sees it: after line splices are joined
// and every comment has become one space (translation phases 2 and 3).
struct LogicalLine {
  std::string text;
  int line;  // the physical line it starts on
};

// How a text is read where the language standard or the context decides:
// raw strings (C++11 on; in C, R"( is a name and a string), digit
// separators (C++14 on; before, 1'/*' is a number and a character literal),
// and header names (after #include or __has_include( the preprocessor reads
// "a\" or <a/*b> whole, but not in a group #if skips, where they are a
// string and tokens).
struct Reading {
  bool raw_strings = true;
  bool digit_separators = true;
  bool header_names = true;
  // Lines joined at a backslash before a line's end: gcc undoes that inside
  // a raw string, so a text with both is also read without joining.
  bool splices = true;
};

// A character a raw string's delimiter may hold.
bool d_char(char c) {
  return c != ' ' && c != '(' && c != ')' && c != '\\' && c != '\t' && c != '\v' && c != '\f' && c != '\n' &&
         c != '\r' && c != '\0';
}

// Where each raw string's closing `)delim"` is, by delimiter: every '"' is
// the end of at most one candidate (the d-chars before it back to a ')').
// Built once per text, so finding an unterminated raw string's end costs a
// lookup, not a scan of the rest of the text.
class RawClosers {
 public:
  explicit RawClosers(const std::string& src) : m_src(src) {}

  // The position just past the `)delim"` closing a raw string opened at
  // `open` (its '('), or npos.
  std::size_t end_after(std::size_t open, std::string_view delim) {
    if (!m_built) build();
    const auto it = m_at.find(std::string(delim));
    if (it == m_at.end()) return std::string::npos;
    const auto pos = std::lower_bound(it->second.begin(), it->second.end(), open + 1);
    return pos == it->second.end() ? std::string::npos : *pos + delim.size() + 2;
  }

 private:
  void build() {
    m_built = true;
    for (std::size_t q = m_src.find('"'); q != std::string::npos; q = m_src.find('"', q + 1)) {
      std::size_t p = q;
      while (p > 0 && q - p < 16 && d_char(m_src[p - 1])) --p;
      if (p > 0 && m_src[p - 1] == ')') m_at[m_src.substr(p, q - p)].push_back(p - 1);
    }
  }

  const std::string& m_src;
  bool m_built = false;
  std::unordered_map<std::string, std::vector<std::size_t>> m_at;
};

// Splits `text` into logical lines. String and character literals (raw
// strings included, when `how` has them) pass through untouched, so "/*"
// inside one opens no comment; a block comment's newlines vanish with it,
// as the standard says, so a '#' after "/* ... */" on a later line is not
// at the start of one. Numbers are read as the preprocessor reads them
// (1.'a, 1e+5, 0x1'f: with digit separators, when `how` has them, a quote
// followed by a digit or letter continues one). Lines end as gcc ends them:
// at '\n', "\r\n" or a lone '\r'; a backslash before a line's end, white
// space between them or not, joins it to the next.
std::vector<LogicalLine> logical_lines(std::string_view text, Reading how) {
  // Phase 2: join splices, make each line end one '\n', and remember on
  // which physical line each remaining character stood.
  std::string src;
  std::vector<int> line_of;
  src.reserve(text.size());
  line_of.reserve(text.size());
  int phys = 1;
  // The length of the line end at `j` ('\n', "\r\n", '\r'), or 0.
  auto line_end = [&](std::size_t j) -> std::size_t {
    if (j >= text.size()) return 0;
    if (text[j] == '\n') return 1;
    if (text[j] == '\r') return j + 1 < text.size() && text[j + 1] == '\n' ? 2 : 1;
    return 0;
  };
  // gcc drops a UTF-8 byte-order mark at the start.
  const std::size_t first = text.starts_with("\xef\xbb\xbf") ? 3 : 0;
  for (std::size_t i = first; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && how.splices) {
      std::size_t j = i + 1;
      while (j < text.size() &&
             (text[j] == ' ' || text[j] == '\t' || text[j] == '\f' || text[j] == '\v' || text[j] == '\0')) {
        ++j;
      }
      if (const std::size_t n = line_end(j); n != 0) {
        i = j + n - 1;
        ++phys;
        continue;
      }
    }
    if (const std::size_t n = line_end(i); n != 0) {
      i += n - 1;
      src.push_back('\n');
      line_of.push_back(phys++);
      continue;
    }
    src.push_back(c);
    line_of.push_back(phys);
  }
  // Phase 3: comments, literals, lines.
  RawClosers closers(src);
  std::vector<LogicalLine> out;
  LogicalLine cur{"", 1};
  bool fresh = true;  // no character of `cur` seen yet
  auto put = [&](char c, std::size_t at) {
    if (fresh) {
      cur.line = line_of[at];
      fresh = false;
    }
    cur.text.push_back(c);
  };
  std::size_t run_start = std::string::npos;  // start of the identifier or number run before i
  bool number = false;                        // that run is a number (a pp-number)
  auto end_run = [&] {
    run_start = std::string::npos;
    number = false;
  };
  for (std::size_t i = 0; i < src.size();) {
    const char c = src[i];
    if (c == '\n') {
      out.push_back(std::move(cur));
      cur = LogicalLine{"", 1};
      fresh = true;
      end_run();
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      while (i < src.size() && src[i] != '\n') ++i;  // to the end of the line
      put(' ', i - 1);
      end_run();
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
      const std::size_t start = i;
      const std::size_t end = src.find("*/", i + 2);
      i = end == std::string::npos ? src.size() : end + 2;
      put(' ', start);
      end_run();
      continue;
    }
    // A header name, where one may come, is read whole (no comment or
    // escape inside), as the preprocessor reads it.
    if (how.header_names && (c == '"' || c == '<') && !fresh && header_name_next(cur.text)) {
      const std::size_t nl = std::min(src.size(), src.find('\n', i));
      const std::size_t close = std::string_view(src).substr(0, nl).find(c == '"' ? '"' : '>', i + 1);
      if (close != std::string::npos) {
        for (std::size_t j = i; j <= close; ++j) put(src[j], j);
        i = close + 1;
        end_run();
        continue;
      }
    }
    if (number) {
      // A pp-number goes on through letters, digits, '.', a sign after an
      // exponent's letter, and a digit separator before a digit or letter.
      const char prev = src[i - 1];
      const bool sign = (c == '+' || c == '-') && (prev == 'e' || prev == 'E' || prev == 'p' || prev == 'P');
      const bool separator = c == '\'' && how.digit_separators && i + 1 < src.size() && is_ident(src[i + 1]);
      if (is_ident(c) || c == '.' || sign || separator) {
        put(c, i);
        ++i;
        continue;
      }
      end_run();
    }
    if (c == '"' || c == '\'') {
      const std::string_view prefix =
          run_start == std::string::npos ? std::string_view() : std::string_view(src).substr(run_start, i - run_start);
      const bool raw = how.raw_strings && c == '"' &&
                       (prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR");
      std::size_t end = std::string::npos;
      if (raw) {
        std::size_t open = i + 1;
        while (open < src.size() && open - i - 1 <= 16 && d_char(src[open])) ++open;
        if (open < src.size() && src[open] == '(' && open - i - 1 <= 16) {
          end = closers.end_after(open, std::string_view(src).substr(i + 1, open - i - 1));
        }
      } else {
        for (std::size_t j = i + 1; j < src.size() && src[j] != '\n'; ++j) {
          if (src[j] == '\\') {
            ++j;
          } else if (src[j] == c) {
            end = j + 1;
            break;
          }
        }
      }
      if (end == std::string::npos) end = std::min(src.size(), src.find('\n', i));  // unterminated
      // A raw string may span lines: its newlines belong to the literal.
      for (std::size_t j = i; j < end; ++j) put(src[j] == '\n' ? ' ' : src[j], j);
      i = end;
      end_run();
      continue;
    }
    if (run_start == std::string::npos &&
        (std::isdigit(static_cast<unsigned char>(c)) != 0 ||
         (c == '.' && i + 1 < src.size() && std::isdigit(static_cast<unsigned char>(src[i + 1])) != 0))) {
      run_start = i;
      number = true;
    } else if (is_ident(c)) {
      if (run_start == std::string::npos) run_start = i;
    } else {
      end_run();
    }
    put(c, i);
    ++i;
  }
  if (!fresh) out.push_back(std::move(cur));
  return out;
}

// Every include-like operand in `text`, whatever preprocessor branch it sits
// in (a superset of what the compiler reads), found on logical lines: after
// splices and comments, with '%:' (the digraph) standing for '#'.
std::vector<Directive> directives_of(std::string_view text, Reading how) {
  std::vector<Directive> out;
  for (const LogicalLine& ll : logical_lines(text, how)) {
    const std::string_view l = ll.text;
    const int first_line = ll.line;
    // __has_include(...) may appear anywhere on a line (#if, #elif, macros).
    for (std::size_t at = l.find("__has_include"); at != std::string_view::npos; at = l.find("__has_include", at + 1)) {
      std::size_t i = at + std::string_view("__has_include").size();
      const bool next = l.substr(i).starts_with("_next");
      if (next) i += 5;
      i = skip_blanks(l, i);
      if (i < l.size() && l[i] == '(') {
        out.push_back(read_operand(l, i + 1, first_line));
        out.back().next = next;
      } else {
        // Not called here: named through a macro (#define HAS __has_include),
        // so its operands cannot be told apart. As for #include MACRO.
        out.push_back({Operand::computed, "__has_include", first_line});
      }
    }
    const std::size_t i = directive_name_at(l);
    if (i == std::string_view::npos) continue;
    std::size_t j = i;
    while (j < l.size() && is_ident(l[j])) ++j;
    const std::string_view word = l.substr(i, j - i);
    if (word == "include" || word == "include_next" || word == "import") {
      Directive d = read_operand(l, j, first_line);
      d.next = word == "include_next";
      if (d.kind != Operand::computed || !d.name.empty()) out.push_back(std::move(d));
    } else if (word == "define") {
      // A macro whose whole body is a header name ("x.h" or <x.h>) is what a
      // computed include usually expands to: its operand is looked for as
      // if included, so a path that leads outside every -I directory is
      // seen too. Any other such macro costs a few probes of absent paths.
      std::size_t k = j;
      k = skip_blanks(l, k);
      while (k < l.size() && is_ident(l[k])) ++k;  // the macro's name
      if (k < l.size() && l[k] == '(') continue;   // function-like: its body is not one name
      Directive d = read_operand(l, k, first_line);
      if (d.kind == Operand::computed || d.name.empty()) continue;
      const std::size_t close = l.find(d.kind == Operand::quoted ? '"' : '>', l.find_first_of("\"<", k) + 1);
      std::size_t rest = close + 1;
      rest = skip_blanks(l, rest);
      if (rest >= l.size()) out.push_back(std::move(d));
    }
  }
  return out;
}

// Trigraphs (??= for #, ??/ for a backslash, ...), which NVRTC replaces
// under -std=c++03, c++11 and c++14.
std::string replace_trigraphs(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '?' && i + 2 < text.size() && text[i + 1] == '?') {
      static constexpr std::string_view k_from = "=/'()!<>-", k_to = "#\\^[]|{}~";
      if (const auto k = k_from.find(text[i + 2]); k != std::string_view::npos) {
        out.push_back(k_to[k]);
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// Every reading `text` needs: the one of today's C++ and, where the text
// holds what an older standard (or C) or a skipped group reads otherwise,
// those too; each with trigraphs as written and replaced where it has any.
// Reading every way and uniting what is found keeps the result a superset,
// whatever the standard the compile uses.
template <class Each>
void for_each_reading(std::string_view text, Each&& each) {
  auto readings_of = [&](std::string_view t) {
    // A raw string's prefix, also with a joined line before its quote.
    const bool raw = t.find("R\"") != std::string_view::npos || t.find("R\\") != std::string_view::npos;
    bool raw_splice = false;
    for (std::size_t p = raw ? t.find('\\') : std::string_view::npos; p != std::string_view::npos && !raw_splice;
         p = t.find('\\', p + 1)) {
      std::size_t j = p + 1;
      while (j < t.size() && blank(t[j]) && t[j] != '\r') ++j;
      raw_splice = j < t.size() && (t[j] == '\n' || t[j] == '\r');
    }
    // A quote after what can end a number (0xA'B, 1.'a, 1e+'a, a UCN), or
    // after a line end (a joined line), may be a digit separator.
    bool separator = false;
    for (std::size_t p = t.find('\''); p != std::string_view::npos && !separator; p = t.find('\'', p + 1)) {
      separator = p > 0 && (is_ident(t[p - 1]) || t[p - 1] == '\n' || t[p - 1] == '\r' || t[p - 1] == '.' ||
                            t[p - 1] == '+' || t[p - 1] == '-' || t[p - 1] == '\\');
    }
    // A header name (after an include-like word) holding what a string or
    // tokens read differently: a backslash, a quote, a comment's start.
    bool header_name = false;
    for (std::size_t b = 0; b < t.size() && !header_name;) {
      std::size_t e = t.find_first_of("\r\n", b);
      if (e == std::string_view::npos) e = t.size();
      const std::string_view line = t.substr(b, e - b);
      for (const std::string_view word : {"include", "import"}) {
        std::size_t w = line.find(word);
        while (w != std::string_view::npos && !header_name) {
          const std::size_t open = line.find_first_of("\"<", w);
          if (open == std::string_view::npos) break;
          std::size_t close = line.find(line[open] == '"' ? '"' : '>', open + 1);
          if (close == std::string_view::npos) close = line.size();
          const std::string_view name = line.substr(open + 1, close - open - 1);
          header_name = name.find_first_of("\\'\"") != std::string_view::npos ||
                        name.find("/*") != std::string_view::npos || name.find("//") != std::string_view::npos;
          w = close >= line.size() ? std::string_view::npos : line.find(word, close);
        }
      }
      b = e + 1;
    }
    for (const bool r : {true, false}) {
      if (!r && !raw) continue;
      for (const bool d : {true, false}) {
        if (!d && !separator) continue;
        for (const bool h : {true, false}) {
          if (!h && !header_name) continue;
          each(t, Reading{r, d, h, true});
          if (r && raw_splice) each(t, Reading{r, d, h, false});
        }
      }
    }
  };
  readings_of(text);
  if (text.find("??") != std::string_view::npos) readings_of(replace_trigraphs(text));
}

}  // namespace

bool may_hold_directives(std::string_view text) {
  constexpr auto k_npos = std::string_view::npos;
  if (text.find('#') != k_npos || text.find("??") != k_npos || text.find("__has_include") != k_npos) return true;
  for (std::size_t p = text.find('%'); p != k_npos; p = text.find('%', p + 1)) {
    if (p + 1 < text.size() && (text[p + 1] == ':' || text[p + 1] == '\\')) return true;
  }
  return false;
}

std::vector<Directive> directives(std::string_view text) {
  if (!may_hold_directives(text)) return {};
  std::vector<Directive> out;
  for_each_reading(text, [&](std::string_view t, Reading how) {
    for (auto& d : directives_of(t, how)) out.push_back(std::move(d));
  });
  return out;
}

LineFacts line_facts(std::string_view text) {
  LineFacts facts;
  bool operator_seen = false;  // _Pragma, outside comments
  bool named_seen = false;     // "dependency" or "pch_preprocess", outside comments
  for_each_reading(text, [&](std::string_view t, Reading how) {
    if (facts.line_directive && facts.file_pragma) return;
    for (const LogicalLine& ll : logical_lines(t, how)) {
      const std::string_view l = ll.text;
      const std::size_t i = directive_name_at(l);
      // `# 12 "f.cu"` (a line marker) or `#line`: a longer name (#linefoo)
      // is taken for one too; a wrong yes costs a store, a wrong no a
      // stale output.
      if (i != std::string_view::npos &&
          ((i < l.size() && std::isdigit(static_cast<unsigned char>(l[i])) != 0) || l.substr(i).starts_with("line"))) {
        facts.line_directive = true;
      }
      // A pragma naming a file, as a directive; through _Pragma, anywhere
      // in the text (a macro may give the _Pragma, its string, or both).
      const bool names =
          l.find("dependency") != std::string_view::npos || l.find("pch_preprocess") != std::string_view::npos;
      if (names && i != std::string_view::npos && l.substr(i).starts_with("pragma")) facts.file_pragma = true;
      operator_seen = operator_seen || l.find("_Pragma") != std::string_view::npos;
      named_seen = named_seen || names;
    }
  });
  facts.file_pragma = facts.file_pragma || (operator_seen && named_seen);
  return facts;
}

bool has_line_directive(std::string_view text) {
  return line_facts(text).line_directive;
}

}  // namespace progcache::detail
