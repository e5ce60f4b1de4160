#include "include_lexer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <functional>
#include <unordered_map>

namespace progcache::detail {

namespace {

// A character of an identifier or a number as gcc reads them: letters,
// digits, '_', '$' and any byte of a UTF-8 sequence.
// (A table: the lexer asks this of nearly every character it reads.)
constexpr auto k_ident = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c >= 0x80;
  }
  return t;
}();
bool is_ident(char c) {
  return k_ident[static_cast<unsigned char>(c)];
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

// The logical lines of a text, in one buffer: each line ends in '\n', and
// `lines` holds, in order, where each starts and the physical line it
// starts on.
// What a reading relied on: whether it took a quote for a digit separator,
// and whether it opened a raw string (found its prefix and quote).
struct Relied {
  bool separator = false;
  bool raw = false;
};
struct LogicalText {
  std::string text;
  std::vector<std::pair<std::size_t, int>> lines;
  Relied relied;
};

// Splits `text` into logical lines. String and character literals (raw
// strings included, when `how` has them) pass through untouched, so "/*"
// inside one opens no comment; a block comment's newlines vanish with it,
// as the standard says, so a '#' after "/* ... */" on a later line is not
// at the start of one. Numbers are read as the preprocessor reads them
// (1.'a, 1e+5, 0x1'f: with digit separators, when `how` has them, a quote
// followed by a digit or letter continues one). Lines end as gcc ends them:
// at '\n', "\r\n" or a lone '\r'; a backslash before a line's end, white
// space between them or not, joins it to the next. The physical line of a
// character is looked up only where a logical line starts: most of a
// text-key hit's own time is this function.
LogicalText logical_lines(std::string_view text, Reading how) {
  // Phase 2: join splices and make each line end one '\n'. `breaks` holds,
  // in order, the offset in `src` from which each physical line's
  // characters stand.
  std::string src;
  src.reserve(text.size());
  std::vector<std::pair<std::size_t, int>> breaks = {{0, 1}};
  int phys = 1;
  // The length of the line end at `j` ('\n', "\r\n", '\r'), or 0.
  auto line_end = [&](std::size_t j) -> std::size_t {
    if (j >= text.size()) return 0;
    if (text[j] == '\n') return 1;
    if (text[j] == '\r') return j + 1 < text.size() && text[j + 1] == '\n' ? 2 : 1;
    return 0;
  };
  // gcc drops a UTF-8 byte-order mark at the start.
  for (std::size_t i = text.starts_with("\xef\xbb\xbf") ? 3 : 0; i < text.size();) {
    std::size_t plain = i;
    while (plain < text.size() && text[plain] != '\\' && text[plain] != '\n' && text[plain] != '\r') ++plain;
    src.append(text.substr(i, plain - i));
    i = plain;
    if (i >= text.size()) break;
    if (text[i] == '\\' && how.splices) {
      std::size_t j = i + 1;
      while (j < text.size() &&
             (text[j] == ' ' || text[j] == '\t' || text[j] == '\f' || text[j] == '\v' || text[j] == '\0')) {
        ++j;
      }
      if (const std::size_t n = line_end(j); n != 0) {
        i = j + n;
        breaks.emplace_back(src.size(), ++phys);
        continue;
      }
    }
    if (const std::size_t n = line_end(i); n != 0) {
      i += n;
      src.push_back('\n');
      breaks.emplace_back(src.size(), ++phys);
      continue;
    }
    src.push_back(text[i++]);
  }
  auto line_of = [&](std::size_t at) {
    const auto it = std::upper_bound(breaks.begin(), breaks.end(), at,
                                     [](std::size_t a, const std::pair<std::size_t, int>& b) { return a < b.first; });
    return std::prev(it)->second;
  };
  // Phase 3: comments, literals, lines. Every character of `src` gives at
  // most one of the result, and the last line its '\n'.
  RawClosers closers(src);
  LogicalText lt;
  std::string& out = lt.text;
  out.resize(src.size() + 1);
  std::size_t w = 0;           // where the next character of `out` goes
  std::size_t line_start = 0;  // where the current logical line starts in `out`
  bool fresh = true;           // no character of it seen yet
  auto so_far = [&] { return std::string_view(out).substr(line_start, w - line_start); };
  auto put = [&](char c, std::size_t at) {
    if (fresh) {
      lt.lines.emplace_back(line_start, line_of(at));
      fresh = false;
    }
    out[w++] = c;
  };
  auto end_line = [&] {
    if (!fresh) out[w++] = '\n';
    line_start = w;
    fresh = true;
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
      end_line();
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
    if (how.header_names && (c == '"' || c == '<') && !fresh && header_name_next(so_far())) {
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
      lt.relied.separator = lt.relied.separator || separator;
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
      lt.relied.raw = lt.relied.raw || raw;
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
  end_line();
  out.resize(w);
  return lt;
}

// The include-like operands on one logical line `l` (starting on physical
// line `first_line`), whatever preprocessor branch it sits in (a superset of
// what the compiler reads), with '%:' (the digraph) standing for '#'.
void directives_on(std::string_view l, int first_line, std::vector<Directive>& out) {
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
  if (i == std::string_view::npos) return;
  std::size_t j = i;
  while (j < l.size() && is_ident(l[j])) ++j;
  const std::string_view word = l.substr(i, j - i);
  if (word == "include" || word == "include_next" || word == "import") {
    Directive d = read_operand(l, j, first_line);
    d.next = word == "include_next";
    d.import = word == "import";
    if (d.kind != Operand::computed || !d.name.empty()) out.push_back(std::move(d));
  } else if (word == "define") {
    // A macro whose whole body is a header name ("x.h" or <x.h>) is what a
    // computed include usually expands to: its operand is looked for as
    // if included, so a path that leads outside every -I directory is
    // seen too. Any other such macro costs a few probes of absent paths.
    std::size_t k = j;
    k = skip_blanks(l, k);
    while (k < l.size() && is_ident(l[k])) ++k;  // the macro's name
    if (k < l.size() && l[k] == '(') return;     // function-like: its body is not one name
    Directive d = read_operand(l, k, first_line);
    if (d.kind == Operand::computed || d.name.empty()) return;
    const std::size_t close = l.find(d.kind == Operand::quoted ? '"' : '>', l.find_first_of("\"<", k) + 1);
    std::size_t rest = close + 1;
    rest = skip_blanks(l, rest);
    if (rest >= l.size()) out.push_back(std::move(d));
  }
}

// Where `word` first is in `all` from `from` on, or npos. A text's words
// are looked for once in the whole of it, where a search that compares at
// every '_' (the toolkit's headers are full of them) costs more than reading.
std::size_t find_in(std::string_view all, std::size_t from, std::string_view word) {
  if (from >= all.size()) return std::string_view::npos;
  const auto hay = all.substr(from);
  const auto it = std::search(hay.begin(), hay.end(), std::boyer_moore_horspool_searcher(word.begin(), word.end()));
  return it == hay.end() ? std::string_view::npos : from + static_cast<std::size_t>(it - hay.begin());
}
constexpr std::string_view k_has = "__has_include";
constexpr std::string_view k_pragma = "_Pragma";
constexpr std::string_view k_dependency = "dependency";
constexpr std::string_view k_pch = "pch_preprocess";

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
// With `every`, also the readings known to be the same as one made.
template <class Each>
void for_each_reading(std::string_view text, bool every, Each&& each) {
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
    for (const std::string_view word : {"include", "import"}) {
      for (std::size_t at = t.find(word); at != std::string_view::npos && !header_name;) {
        std::size_t b = at;
        while (b > 0 && t[b - 1] != '\n' && t[b - 1] != '\r') --b;
        std::size_t e = at;
        while (e < t.size() && t[e] != '\n' && t[e] != '\r') ++e;
        const std::string_view line = t.substr(b, e - b);
        std::size_t w = at - b;
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
        at = t.find(word, e);
      }
    }
    // A reading that differs from one already made only where that one
    // relied on nothing of the difference is the same reading: a text whose
    // reading with digit separators took no quote for one is read the same
    // without them (most quotes are in comments: "don't"), and one whose
    // readings with raw strings opened none, without them.
    bool raw_opened = false;
    for (const bool r : {true, false}) {
      if (!r && !(raw && (raw_opened || every))) continue;
      std::array<std::array<bool, 2>, 2> separator_taken{};  // by header names, splices
      for (const bool d : {true, false}) {
        for (const bool h : {true, false}) {
          if (!h && !header_name) continue;
          for (const bool sp : {true, false}) {
            if (!sp && !(r && raw_splice)) continue;
            if (!d && !(separator && (separator_taken[h ? 1 : 0][sp ? 1 : 0] || every))) continue;
            const Relied relied = each(t, Reading{r, d, h, sp});
            if (d) separator_taken[h ? 1 : 0][sp ? 1 : 0] = relied.separator;
            raw_opened = raw_opened || relied.raw;
          }
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

Scan scan(std::string_view text, bool every_reading) {
  Scan found;
  // Nothing a logical line could start a directive with, nor a _Pragma
  // (which a splice may also make): nothing to read.
  if (!may_hold_directives(text) && text.find("_Pragma") == std::string_view::npos &&
      text.find('\\') == std::string_view::npos) {
    return found;
  }
  bool operator_seen = false;  // _Pragma, outside comments
  bool named_seen = false;     // "dependency" or "pch_preprocess", outside comments
  for_each_reading(text, every_reading, [&](std::string_view t, Reading how) {
    const LogicalText lt = logical_lines(t, how);
    const std::string_view all = lt.text;
    // Words looked for anywhere are looked for in the whole buffer at once
    // (no word spans the '\n' between two lines).
    std::size_t has = find_in(all, 0, k_has);
    for (std::size_t k = 0; k < lt.lines.size(); ++k) {
      const auto [begin, first_line] = lt.lines[k];
      const std::size_t end = (k + 1 < lt.lines.size() ? lt.lines[k + 1].first : all.size()) - 1;
      const std::string_view l = all.substr(begin, end - begin);
      const std::size_t i = directive_name_at(l);
      if (i == std::string_view::npos && has > end) continue;
      directives_on(l, first_line, found.directives);
      if (has < end) has = find_in(all, end, k_has);
      if (i == std::string_view::npos) continue;
      // `# 12 "f.cu"` (a line marker) or `#line`: a longer name (#linefoo)
      // is taken for one too; a wrong yes costs a store, a wrong no a
      // stale output.
      if ((i < l.size() && std::isdigit(static_cast<unsigned char>(l[i])) != 0) || l.substr(i).starts_with("line")) {
        found.facts.line_directive = true;
      }
      // A pragma naming a file, as a directive.
      if (l.substr(i).starts_with("pragma") &&
          (l.find("dependency") != std::string_view::npos || l.find("pch_preprocess") != std::string_view::npos)) {
        found.facts.file_pragma = true;
      }
    }
    // Through _Pragma, anywhere in the text (a macro may give the _Pragma,
    // its string, or both).
    operator_seen = operator_seen || find_in(all, 0, k_pragma) != std::string_view::npos;
    named_seen = named_seen || find_in(all, 0, k_dependency) != std::string_view::npos ||
                 find_in(all, 0, k_pch) != std::string_view::npos;
    return lt.relied;
  });
  found.facts.file_pragma = found.facts.file_pragma || (operator_seen && named_seen);
  return found;
}

std::vector<Directive> directives(std::string_view text) {
  if (!may_hold_directives(text)) return {};
  return scan(text).directives;
}

LineFacts line_facts(std::string_view text) {
  return scan(text).facts;
}

bool has_line_directive(std::string_view text) {
  return line_facts(text).line_directive;
}

}  // namespace progcache::detail
