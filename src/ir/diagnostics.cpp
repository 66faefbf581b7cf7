// Error types with their positions.
#include "xjit/ir/diagnostics.h"

namespace xjit {

ParseError::ParseError(std::string file, int line, int col, std::string message)
    : Error(ErrorKind::User,
            file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": error: " + message),
      line_(line), col_(col), message_(std::move(message)) {}

VerifyError::VerifyError(const Op *op, const std::string &message)
    : Error(ErrorKind::User, op ? op->describe() + ": " + message : message) {}

} // namespace xjit
