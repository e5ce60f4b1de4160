// nvcc/nvcc_texts.cpp — what nvcc itself writes that the launcher reads:
// the variables nvcc.profile names, and the steps `nvcc --dryrun` prints
// (nvcc_command.h declares both).
#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nvcc/nvcc_command.h"

namespace progcache::nvcc {

ProfileVariables profile_variables(std::string_view text) {
  ProfileVariables out;
  std::set<std::string> seen;
  auto note = [&](std::string_view name) {
    if (!name.empty() && seen.insert(std::string(name)).second) out.names.emplace_back(name);
  };
  auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    // NAME = value, NAME += value, NAME =+ value, NAME ?= value
    std::size_t i = 0;
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i])) != 0) ++i;
    std::size_t j = i;
    while (j < line.size() && is_name_char(line[j])) ++j;
    std::size_t k = j;
    while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
    if (j > i && k < line.size() && (line[k] == '=' || line[k] == '+' || line[k] == '?')) {
      const std::string_view name = line.substr(i, j - i);
      note(name);
      // A plain '=' replaces the environment's value, unless the value
      // reads the variable itself.
      const bool plain = line[k] == '=' && (k + 1 >= line.size() || line[k + 1] != '+') &&
                         line.find("$(" + std::string(name) + ")") == std::string_view::npos;
      if (plain && std::find(out.replaced.begin(), out.replaced.end(), name) == out.replaced.end()) {
        out.replaced.emplace_back(name);
      }
    }
    for (auto ref = line.find("$("); ref != std::string_view::npos; ref = line.find("$(", ref + 2)) {
      const auto close = line.find(')', ref + 2);
      if (close == std::string_view::npos) break;
      note(line.substr(ref + 2, close - ref - 2));
    }
  }
  return out;
}

namespace {

// A line of `nvcc --dryrun` split as the shell nvcc runs it would split it:
// words at white space, "..." (with \" \\ \$ \` escapes) and '...' quoting,
// a backslash outside quotes. nullopt for what a shell would expand ($, `)
// or an unterminated quote: the words are then not known here.
std::optional<std::vector<std::string>> shell_words(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(std::move(cur));
      cur.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '$' || c == '`') return std::nullopt;
    if (c == '\\') {
      if (++i >= line.size()) return std::nullopt;
      cur += line[i];
    } else if (c == '\'') {
      const auto end = line.find('\'', i + 1);
      if (end == std::string_view::npos) return std::nullopt;
      cur.append(line.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return std::nullopt;
        const char d = line[i];
        if (d == '"') break;
        if (d == '$' || d == '`') return std::nullopt;
        if (d == '\\' && i + 1 < line.size() &&
            std::string_view("\"\\$`").find(line[i + 1]) != std::string_view::npos) {
          cur += line[++i];
        } else {
          cur += d;
        }
      }
    } else {
      cur += c;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

bool variable_name(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n.front())) != 0) return false;
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
}

}  // namespace

namespace {

// `line` less the redirections of output a shell would act on at its end
// ("> f", "2>f", ">> f", each to one plain word); nullopt where what
// follows the first unquoted '<' or '>' is anything else.
std::optional<std::string_view> without_redirections(std::string_view line) {
  char quote = 0;
  std::size_t cut = std::string_view::npos;
  for (std::size_t i = 0; i < line.size() && cut == std::string_view::npos; ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"')
        ++i;
    } else if (c == '\\') {
      ++i;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '>' || c == '<') {
      cut = i;
      // A file descriptor's number right before it belongs to it ("2>").
      while (cut > 0 && std::isdigit(static_cast<unsigned char>(line[cut - 1])) != 0) --cut;
      if (cut > 0 && line[cut - 1] != ' ' && line[cut - 1] != '\t') return std::nullopt;
    }
  }
  if (cut == std::string_view::npos) return line;
  std::string_view rest = line.substr(cut);
  while (!rest.empty()) {
    std::size_t i = 0;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])) != 0) ++i;
    // Output only: a step given its input from a file ("< f") is not one
    // the launcher could run as nvcc does.
    if (i >= rest.size() || rest[i] != '>') return std::nullopt;
    ++i;
    if (i < rest.size() && rest[i] == '>') ++i;
    while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < rest.size() && std::string_view(" \t'\"\\$`<>|;&()*?[]{}~").find(rest[i]) == std::string_view::npos) ++i;
    if (i == start) return std::nullopt;  // no file, or one a shell would expand
    while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
    rest.remove_prefix(i);
  }
  return line.substr(0, cut);
}

}  // namespace

Result<DryRun> parse_dryrun(std::string_view text) {
  DryRun out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.starts_with("#$ ")) continue;  // nvcc's own messages
    line.remove_prefix(3);
    const auto eq = line.find('=');
    const auto space = line.find_first_of(" \t");
    if (eq != std::string_view::npos && (space == std::string_view::npos || eq < space) &&
        variable_name(line.substr(0, eq))) {
      // NAME=value: set for the tools when the value is one word (PATH,
      // LD_LIBRARY_PATH, ...); nvcc's lists of several are its own.
      auto words = shell_words(line.substr(eq + 1));
      if (!words) return invalid_argument("a variable nvcc sets cannot be read: " + std::string(line));
      if (words->size() <= 1) {
        out.env.emplace_back(std::string(line.substr(0, eq)), words->empty() ? std::string() : words->front());
      }
      continue;
    }
    // Only the host compiler's -E runs matter: a step with "-E" among its
    // words (nvcc's other steps and pseudo-steps have none).
    if (line.find(" -E ") == std::string_view::npos) continue;
    // With --threads, nvcc runs each step with its output sent to files
    // of its own ("> f 2>g"): the launcher captures a step's output itself.
    const auto command = without_redirections(line);
    if (!command)
      return invalid_argument("a preprocessing step of nvcc --dryrun cannot be split: " + std::string(line));
    line = *command;
    auto words = shell_words(line);
    if (!words || words->empty()) {
      return invalid_argument("a preprocessing step of nvcc --dryrun cannot be split: " + std::string(line));
    }
    if (std::find(words->begin(), words->end(), "-E") == words->end()) continue;
    std::vector<std::string> step;
    bool output = false;
    for (std::size_t i = 0; i < words->size(); ++i) {
      const std::string& w = (*words)[i];
      // -M and -MM make a dependency list instead of the text: not a
      // translation unit. Its -o and its dependency options are the launcher's.
      if (w == "-M" || w == "-MM") {
        step.clear();
        break;
      }
      if (w == "-o" || w == "-MF" || w == "-MT" || w == "-MQ") {
        if (i + 1 >= words->size()) return invalid_argument("a preprocessing step ends in '" + w + "'");
        output = output || w == "-o";
        ++i;
        continue;
      }
      if (w == "-MD" || w == "-MMD" || w == "-MP") continue;
      step.push_back(w);
    }
    if (step.empty()) continue;
    if (!output) return invalid_argument("a preprocessing step without -o");
    out.preprocess.push_back(std::move(step));
  }
  if (out.preprocess.empty()) return invalid_argument("nvcc --dryrun shows no preprocessing step");
  return out;
}

}  // namespace progcache::nvcc
