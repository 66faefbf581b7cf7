# lit configuration for the IR text tests: printer/parser round trips, parse errors with
# line:col, and verifier diagnostics (xjit-opt --verify-diagnostics).
#
#   lit -sv tests/ir -Dxjit_build_dir=/abs/path/to/build
#
# xjit-opt is taken from <xjit_build_dir>/tools (lit param, else $XJIT_BUILD_DIR, else ./build);
# FileCheck and not from the LLVM 19 tools (lit param llvm_bin).
import os

import lit.formats

config.name = "xjit-ir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".xir"]
config.test_source_root = os.path.dirname(__file__)

repo_root = os.path.dirname(os.path.dirname(config.test_source_root))
build_dir = (lit_config.params.get("xjit_build_dir") or os.environ.get("XJIT_BUILD_DIR")
             or os.path.join(repo_root, "build"))
build_dir = os.path.abspath(build_dir)
config.test_exec_root = os.path.join(build_dir, "tests", "ir")
tools_dir = os.path.join(build_dir, "tools")
if not os.path.isfile(os.path.join(tools_dir, "xjit-opt")):
    lit_config.fatal(f"xjit-opt not found in {tools_dir}; pass -Dxjit_build_dir=<build dir>")

llvm_bin = lit_config.params.get("llvm_bin", "/usr/lib/llvm-19/bin")
for tool in ("FileCheck", "not"):
    if not os.path.isfile(os.path.join(llvm_bin, tool)):
        lit_config.fatal(f"{tool} not found in {llvm_bin}; pass -Dllvm_bin=<dir>")

# Tools are found on PATH rather than by text substitution, so file paths that happen to
# contain a tool name are left alone.
config.environment["PATH"] = os.pathsep.join(
    [tools_dir, llvm_bin, config.environment.get("PATH", os.environ.get("PATH", ""))])
