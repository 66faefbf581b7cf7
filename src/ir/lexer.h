// Tokenizer for the IR text format (docs/ir.md). Tokens are produced on demand
// from a byte position, so the parser can also scan raw text where the token
// grammar does not apply (dimension expressions such as `(s0+1)//2`, whose `//`
// is not a comment). Every error is a ParseError with the 1-based line:col of
// the offending character.
#pragma once

#include "xjit/ir/diagnostics.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xjit::text {

enum class Tok : uint8_t {
  Eof,
  Ident,    // [A-Za-z_][A-Za-z0-9_.]*  (op names, dtypes, keywords)
  ValueRef, // %name or %name#N   (name: [A-Za-z0-9_.]+)
  Int,      // -?[0-9]+
  Float,    // -?[0-9]+ ('.' [0-9]+)? ([eE][+-]?[0-9]+)?  with '.' or exponent
  String,   // "..." with C escapes, decoded into Token::str
  Arrow,    // ->
  Punct,    // one of ( ) { } [ ] < > , : = @ ^ -
};

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; // the token's source text
  size_t offset = 0;     // byte offset of its first character
  size_t end = 0;        // byte offset just past it
  std::string str;       // String: decoded contents; ValueRef: the name without '%' and '#N'
  int64_t intValue = 0;  // Int
  double floatValue = 0; // Float
  int resultIndex = -1;  // ValueRef: N of %name#N, else -1

  bool is(char punct) const { return kind == Tok::Punct && text.size() == 1 && text[0] == punct; }
  bool isIdent(std::string_view s) const { return kind == Tok::Ident && text == s; }
};

class Lexer {
public:
  Lexer(std::string_view src, std::string filename);

  /// The k-th token ahead (0: the next one) without consuming anything.
  const Token &peek(size_t k = 0);
  /// Consumes and returns the next token.
  Token next();

  /// Raw access, for text the token grammar does not cover. rawPos() is the
  /// first byte not consumed; skipBlanks() skips spaces and tabs only (no
  /// newlines or comments).
  size_t rawPos() const { return pos_; }
  void skipBlanks();
  std::string_view src() const { return src_; }
  void setRawPos(size_t pos);

  /// 1-based line and column of a byte offset.
  std::pair<int, int> lineCol(size_t offset) const;
  [[noreturn]] void error(size_t offset, const std::string &message) const;
  const std::string &filename() const { return filename_; }

  /// How a token reads in an error message: "'foo'", "end of input", ...
  static std::string describe(const Token &t);

private:
  Token lexAt(size_t pos) const;
  size_t skipTrivia(size_t pos) const;
  void lexNumber(Token &t, size_t pos) const;
  void lexString(Token &t, size_t pos) const;

  std::string_view src_;
  std::string filename_;
  std::vector<size_t> lineStarts_;
  size_t pos_ = 0;
  std::vector<Token> ahead_; // tokens already lexed from pos_
};

/// True if `s` is a bare value name: [A-Za-z0-9_.]+.
bool isValueName(std::string_view s);
/// True if `s` reads as an identifier: [A-Za-z_][A-Za-z0-9_.]*.
bool isIdentifier(std::string_view s);
/// A double-quoted string with C escapes (\n \t \r \\ \" and \xHH for other
/// bytes < 0x20 and 0x7f; UTF-8 passes through), as the lexer reads it back.
std::string quoteString(std::string_view s);

} // namespace xjit::text
