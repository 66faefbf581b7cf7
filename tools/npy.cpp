#include "npy.h"

#include "xjit/ir/diagnostics.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <variant>
#include <vector>

namespace xjit::npy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

[[noreturn]] void fail(const std::string &name, const std::string &msg) {
  throw Error(ErrorKind::User, name + ": " + msg);
}

struct DTypeCode {
  DType dtype;
  char kind; // numpy kind character
  std::string_view descr;
};

// The descr written for each dtype; reading also accepts other byte-order
// characters.
constexpr std::array<DTypeCode, kNumDTypes> kCodes{{
    {DType::F64, 'f', "<f8"},
    {DType::F32, 'f', "<f4"},
    {DType::F16, 'f', "<f2"},
    {DType::BF16, 'V', "|V2"},
    {DType::I64, 'i', "<i8"},
    {DType::I32, 'i', "<i4"},
    {DType::I16, 'i', "<i2"},
    {DType::I8, 'i', "|i1"},
    {DType::U8, 'u', "|u1"},
    {DType::Bool, 'b', "|b1"},
}};

struct Descr {
  DType dtype;
  bool bigEndian;
};

Descr parseDescr(const std::string &descr, const std::string &name) {
  auto unsupported = [&]() -> Descr {
    fail(name, "unsupported dtype '" + descr +
                   "' (supported: <f8 <f4 <f2 <i8 <i4 <i2 |i1 |u1 |b1, and |V2 "
                   "for bf16)");
  };
  if (descr.size() < 3)
    return unsupported();
  char order = descr[0], kind = descr[1];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return unsupported();
  std::string_view size = std::string_view(descr).substr(2);
  for (const DTypeCode &c : kCodes) {
    if (c.kind == kind && size == std::to_string(dtypeSize(c.dtype)))
      return {c.dtype, order == '>' && dtypeSize(c.dtype) > 1 && kind != 'V'};
  }
  return unsupported();
}

/// The subset of Python literals a .npy header uses: strings, booleans, tuples
/// of ints.
using HeaderValue = std::variant<std::string, bool, std::vector<int64_t>>;

class HeaderParser {
public:
  HeaderParser(std::string_view text, const std::string &name) : s_(text), name_(name) {}

  std::vector<std::pair<std::string, HeaderValue>> parseDict() {
    std::vector<std::pair<std::string, HeaderValue>> out;
    expect('{');
    while (!peekIs('}')) {
      std::string key = parseString();
      expect(':');
      out.emplace_back(std::move(key), parseValue());
      if (!peekIs('}'))
        expect(',');
    }
    expect('}');
    skipSpace();
    if (pos_ != s_.size())
      error("unexpected text after the header dictionary");
    return out;
  }

private:
  [[noreturn]] void error(const std::string &msg) {
    fail(name_, "malformed .npy header (" + msg + " at offset " + std::to_string(pos_) +
                    "): " + std::string(s_));
  }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
  }
  bool peekIs(char c) {
    skipSpace();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peekIs(c))
      error(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parseString() {
    skipSpace();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
      error("expected a string");
    char quote = s_[pos_++];
    size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos)
      error("unterminated string");
    std::string v(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return v;
  }
  HeaderValue parseValue() {
    skipSpace();
    if (pos_ >= s_.size())
      error("expected a value");
    char c = s_[pos_];
    if (c == '\'' || c == '"')
      return parseString();
    if (c == '(')
      return parseTuple();
    if (c == '[')
      error("structured (record) dtypes are not supported");
    static constexpr std::array<std::pair<std::string_view, bool>, 2> kBools{
        {{"True", true}, {"False", false}}};
    for (const auto &[word, v] : kBools) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return v;
      }
    }
    error("unexpected value");
  }
  std::vector<int64_t> parseTuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!peekIs(')')) {
      size_t start = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
        ++pos_;
      // Python 2 era files may write longs as "3L".
      std::string digits(s_.substr(start, pos_ - start));
      if (pos_ < s_.size() && s_[pos_] == 'L')
        ++pos_;
      if (digits.empty() || digits.size() > 18)
        error("expected a non-negative dimension");
      dims.push_back(std::stoll(digits));
      if (!peekIs(')'))
        expect(',');
    }
    expect(')');
    return dims;
  }

  std::string_view s_;
  const std::string &name_;
  size_t pos_ = 0;
};

uint32_t readLE(std::string_view bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

std::string shapeText(const std::vector<int64_t> &sizes) {
  std::string s = "(";
  for (int64_t d : sizes)
    s += std::to_string(d) + ", ";
  if (!sizes.empty())
    s.resize(s.size() - 2);
  if (sizes.size() == 1)
    s += ",";
  return s + ")";
}

} // namespace

Tensor parse(std::string_view bytes, const std::string &name) {
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic)
    fail(name, "not a .npy file (bad magic string)");
  int major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3)
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(static_cast<unsigned char>(bytes[7])));
  size_t lenWidth = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + lenWidth)
    fail(name, "truncated .npy header");
  size_t headerLen = readLE(bytes, 8, lenWidth);
  size_t dataStart = 8 + lenWidth + headerLen;
  if (bytes.size() < dataStart)
    fail(name, "truncated .npy header");
  std::string_view header = bytes.substr(8 + lenWidth, headerLen);

  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  for (auto &[key, value] : HeaderParser(header, name).parseDict()) {
    auto mismatch = [&] { fail(name, "malformed .npy header: bad value for '" + key + "'"); };
    if (key == "descr") {
      if (!std::holds_alternative<std::string>(value))
        mismatch();
      descr = std::get<std::string>(value);
    } else if (key == "fortran_order") {
      if (!std::holds_alternative<bool>(value))
        mismatch();
      fortran = std::get<bool>(value);
    } else if (key == "shape") {
      if (!std::holds_alternative<std::vector<int64_t>>(value))
        mismatch();
      shape = std::get<std::vector<int64_t>>(value);
    }
  }
  if (!descr || !fortran || !shape)
    fail(name, "malformed .npy header: needs 'descr', 'fortran_order' and 'shape'");
  Descr d = parseDescr(*descr, name);

  const int64_t item = dtypeSize(d.dtype);
  int64_t numel = 1;
  for (int64_t dim : *shape) {
    if (dim != 0 && numel > std::numeric_limits<int64_t>::max() / item / dim)
      fail(name, "shape " + shapeText(*shape) + " is too large");
    numel *= dim;
  }
  const size_t nbytes = static_cast<size_t>(numel * item);
  // Trailing bytes are ignored, like numpy (a stream may hold several arrays).
  if (bytes.size() - dataStart < nbytes)
    fail(name, "truncated data: shape " + shapeText(*shape) + " of " + *descr + " needs " +
                   std::to_string(nbytes) + " bytes, the file has " +
                   std::to_string(bytes.size() - dataStart));

  auto storage = std::make_shared<Storage>(static_cast<int64_t>(nbytes));
  char *out = static_cast<char *>(storage->data());
  std::memcpy(out, bytes.data() + dataStart, nbytes);
  if (d.bigEndian)
    for (size_t i = 0; i < nbytes; i += static_cast<size_t>(item))
      std::reverse(out + i, out + i + item);
  if (d.dtype == DType::Bool) // numpy's bool is any non-zero byte; the IR's is 0 or 1
    for (size_t i = 0; i < nbytes; ++i)
      out[i] = out[i] != 0;

  std::vector<int64_t> strides = contiguousStrides(*shape);
  if (*fortran) {
    int64_t s = 1;
    for (size_t i = 0; i < shape->size(); ++i) {
      strides[i] = s;
      s *= std::max<int64_t>((*shape)[i], 1);
    }
  }
  return Tensor(std::move(storage), d.dtype, *shape, std::move(strides), 0);
}

std::string serialize(const Tensor &t) {
  Tensor c = t.isContiguous() ? t : t.contiguousCopy();
  auto code = std::find_if(kCodes.begin(), kCodes.end(),
                           [&](const DTypeCode &x) { return x.dtype == c.dtype(); });
  std::string dict = "{'descr': '" + std::string(code->descr) +
                     "', 'fortran_order': False, 'shape': " + shapeText(c.sizes()) + ", }";
  // Pad with spaces so the data starts at a multiple of 64 bytes; the header
  // ends in '\n'.
  size_t lenWidth = 2;
  int major = 1;
  auto padded = [&](size_t width) {
    size_t total = kMagic.size() + 2 + width + dict.size() + 1;
    return dict.size() + (64 - total % 64) % 64 + 1;
  };
  if (padded(2) > std::numeric_limits<uint16_t>::max()) {
    lenWidth = 4;
    major = 2;
  }
  size_t headerLen = padded(lenWidth);
  std::string out(kMagic);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < lenWidth; ++i)
    out += static_cast<char>((headerLen >> (8 * i)) & 0xff);
  out += dict;
  out.append(headerLen - dict.size() - 1, ' ');
  out += '\n';
  size_t nbytes = static_cast<size_t>(c.numel() * dtypeSize(c.dtype()));
  out.append(c.data(), nbytes);
  return out;
}

Tensor read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::User, path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    throw Error(ErrorKind::User, path + ": read error");
  return parse(ss.str(), path);
}

void write(const std::string &path, const Tensor &t) {
  std::string bytes = serialize(t);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw Error(ErrorKind::User, path + ": cannot write: " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    throw Error(ErrorKind::User, path + ": write failed: " + std::strerror(errno));
}

} // namespace xjit::npy
