// Tokenizer for the IR text format; see lexer.h.
#include "lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

namespace xjit::text {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isNameChar(char c) { return isAlpha(c) || isDigit(c) || c == '.'; }
bool isPunct(char c) {
  return std::string_view("(){}[]<>,:=@^-").find(c) != std::string_view::npos;
}

std::string charText(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "'\\x%02x'", u);
  return buf;
}

int hexValue(char c) {
  if (isDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

} // namespace

bool isValueName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), isNameChar);
}

bool isIdentifier(std::string_view s) {
  return !s.empty() && isAlpha(s[0]) && std::all_of(s.begin(), s.end(), isNameChar);
}

std::string quoteString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    case '\r': out += "\\r"; break;
    case '\\': out += "\\\\"; break;
    case '"': out += "\\\""; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

Lexer::Lexer(std::string_view src, std::string filename)
    : src_(src), filename_(std::move(filename)) {
  lineStarts_.push_back(0);
  for (size_t i = 0; i < src_.size(); ++i)
    if (src_[i] == '\n') lineStarts_.push_back(i + 1);
}

std::pair<int, int> Lexer::lineCol(size_t offset) const {
  offset = std::min(offset, src_.size());
  auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), offset) - 1;
  return {static_cast<int>(it - lineStarts_.begin()) + 1, static_cast<int>(offset - *it) + 1};
}

void Lexer::error(size_t offset, const std::string &message) const {
  auto [line, col] = lineCol(offset);
  throw ParseError(filename_, line, col, message);
}

std::string Lexer::describe(const Token &t) {
  switch (t.kind) {
  case Tok::Eof: return "end of input";
  case Tok::String: return "string " + std::string(t.text);
  default: return "'" + std::string(t.text) + "'";
  }
}

void Lexer::skipBlanks() {
  ahead_.clear();
  while (pos_ < src_.size() && (src_[pos_] == ' ' || src_[pos_] == '\t')) ++pos_;
}

void Lexer::setRawPos(size_t pos) {
  ahead_.clear();
  pos_ = std::min(pos, src_.size());
}

size_t Lexer::skipTrivia(size_t pos) const {
  while (pos < src_.size()) {
    char c = src_[pos];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos;
    } else if (c == '/' && pos + 1 < src_.size() && src_[pos + 1] == '/') {
      while (pos < src_.size() && src_[pos] != '\n') ++pos;
    } else {
      break;
    }
  }
  return pos;
}

const Token &Lexer::peek(size_t k) {
  while (ahead_.size() <= k) {
    size_t from = ahead_.empty() ? pos_ : ahead_.back().end;
    if (!ahead_.empty() && ahead_.back().kind == Tok::Eof) return ahead_.back();
    ahead_.push_back(lexAt(from));
  }
  return ahead_[k];
}

Token Lexer::next() {
  Token t = peek();
  ahead_.erase(ahead_.begin());
  pos_ = t.end;
  return t;
}

Token Lexer::lexAt(size_t pos) const {
  pos = skipTrivia(pos);
  Token t;
  t.offset = pos;
  if (pos >= src_.size()) {
    t.kind = Tok::Eof;
    t.end = pos;
    return t;
  }
  char c = src_[pos];
  size_t p = pos;
  if (isAlpha(c)) {
    while (p < src_.size() && isNameChar(src_[p])) ++p;
    t.kind = Tok::Ident;
  } else if (c == '%') {
    ++p;
    while (p < src_.size() && isNameChar(src_[p])) ++p;
    if (p == pos + 1) error(p, "expected a value name after '%'");
    t.kind = Tok::ValueRef;
    t.str = std::string(src_.substr(pos + 1, p - pos - 1));
    if (p < src_.size() && src_[p] == '#') {
      size_t d = ++p;
      while (p < src_.size() && isDigit(src_[p])) ++p;
      if (p == d) error(p, "expected a result index after '#'");
      auto r = std::from_chars(src_.data() + d, src_.data() + p, t.resultIndex);
      if (r.ec != std::errc()) error(d, "result index out of range");
    }
  } else if (isDigit(c) || (c == '-' && p + 1 < src_.size() && isDigit(src_[p + 1]))) {
    lexNumber(t, pos);
    return t;
  } else if (c == '"') {
    lexString(t, pos);
    return t;
  } else if (c == '-' && p + 1 < src_.size() && src_[p + 1] == '>') {
    p += 2;
    t.kind = Tok::Arrow;
  } else if (isPunct(c)) {
    ++p;
    t.kind = Tok::Punct;
  } else {
    error(pos, "unexpected character " + charText(c));
  }
  t.end = p;
  t.text = src_.substr(pos, p - pos);
  return t;
}

void Lexer::lexNumber(Token &t, size_t pos) const {
  size_t p = pos;
  if (src_[p] == '-') ++p;
  while (p < src_.size() && isDigit(src_[p])) ++p;
  bool isFloat = false;
  if (p + 1 < src_.size() && src_[p] == '.' && isDigit(src_[p + 1])) {
    isFloat = true;
    ++p;
    while (p < src_.size() && isDigit(src_[p])) ++p;
  }
  if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
    size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && isDigit(src_[q])) {
      isFloat = true;
      p = q;
      while (p < src_.size() && isDigit(src_[p])) ++p;
    }
  }
  // A number running straight into a name ("12abc") is a typo, not two tokens.
  if (p < src_.size() && (isAlpha(src_[p]) || src_[p] == '.'))
    error(p, "unexpected character " + charText(src_[p]) + " in number");
  t.end = p;
  t.text = src_.substr(pos, p - pos);
  const char *b = src_.data() + pos, *e = src_.data() + p;
  if (isFloat) {
    t.kind = Tok::Float;
    auto r = std::from_chars(b, e, t.floatValue);
    if (r.ec != std::errc() || r.ptr != e)
      error(pos, "float literal '" + std::string(t.text) + "' out of range");
  } else {
    t.kind = Tok::Int;
    auto r = std::from_chars(b, e, t.intValue);
    if (r.ec != std::errc() || r.ptr != e)
      error(pos, "integer literal '" + std::string(t.text) + "' out of range");
  }
}

void Lexer::lexString(Token &t, size_t pos) const {
  size_t p = pos + 1;
  std::string out;
  for (;;) {
    if (p >= src_.size() || src_[p] == '\n') error(pos, "unterminated string");
    char c = src_[p];
    if (c == '"') break;
    if (c != '\\') {
      out += c;
      ++p;
      continue;
    }
    if (p + 1 >= src_.size()) error(pos, "unterminated string");
    char e = src_[p + 1];
    switch (e) {
    case 'n': out += '\n'; break;
    case 't': out += '\t'; break;
    case 'r': out += '\r'; break;
    case '0': out += '\0'; break;
    case '\\': out += '\\'; break;
    case '"': out += '"'; break;
    case '\'': out += '\''; break;
    case 'x': {
      int hi = p + 2 < src_.size() ? hexValue(src_[p + 2]) : -1;
      int lo = p + 3 < src_.size() ? hexValue(src_[p + 3]) : -1;
      if (hi < 0 || lo < 0) error(p, "expected two hex digits after '\\x'");
      out += static_cast<char>(hi * 16 + lo);
      p += 2;
      break;
    }
    default: error(p, "unknown escape sequence '\\" + std::string(1, e) + "' in string");
    }
    p += 2;
  }
  t.kind = Tok::String;
  t.end = p + 1;
  t.text = src_.substr(pos, t.end - pos);
  t.str = std::move(out);
}

} // namespace xjit::text
