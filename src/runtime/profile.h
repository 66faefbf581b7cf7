// XJIT_PROFILE: time spent per instruction kind of compiled graphs, printed at exit.
//
// XJIT_PROFILE=1 groups instructions by what they run ("native conv2d", "native fusion
// epilogue(conv2d+add+relu)", "reference permute"); XJIT_PROFILE=op keeps every instruction of
// every compiled graph apart (its op, source location and result type). Off (unset or "0"),
// the runtime pays one predictable branch per instruction. docs/runtime.md.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/runtime/runtime.h"

#include <cstdint>
#include <string>

namespace xjit::runtime {

struct ProfileRow;

/// The row an instruction's time goes to; `how` is "native", "reference" or "external".
/// Rows with the same label are shared by all graphs; a row never moves or dies, so
/// instructions keep its address. Thread-safe.
ProfileRow *profileRow(const Op &op, const char *how);

/// Adds one call of `ns` nanoseconds to a row. Thread-safe, lock-free.
void profileAdd(ProfileRow *row, int64_t ns);

/// The label of an op for level 1: "conv2d", "fusion epilogue(conv2d+add+relu)".
std::string profileLabel(const Op &op);

} // namespace xjit::runtime
