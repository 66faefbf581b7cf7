// xjit._xjit.compile / CompiledGraph: the runtime (compileGraph on the process's CPU target)
// from Python, run on numpy arrays / torch tensors exchanged zero-copy through DLPack.
#include "runtime_bindings.h"

#include "convert.h"

#include "xjit/backend/jit.h"
#include "xjit/runtime/runtime.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

namespace xjit::py {
namespace {

using namespace nb::literals;

std::unique_ptr<runtime::CompiledGraph> compileForCpu(const Graph &g, const std::string &pipeline,
                                                      bool useTarget, bool keepText) {
  runtime::CompileOptions opts;
  opts.pipeline = pipeline;
  opts.useTarget = useTarget;
  opts.target.keepText = keepText;
  nb::gil_scoped_release nogil; // passes and LLVM do not touch Python
  return std::make_unique<runtime::CompiledGraph>(
      runtime::compileGraph(g, runtime::cpuTarget(), opts));
}

nb::list runCompiled(const runtime::CompiledGraph &cg, const nb::sequence &inputs,
                     const std::string &framework) {
  Framework fw = parseFramework(framework);
  const Graph &g = cg.graph();
  std::vector<RtValue> ins = graphInputs(g, inputs);
  std::vector<RtValue> outs;
  {
    nb::gil_scoped_release nogil;
    outs = cg.run(std::move(ins));
  }
  nb::list out;
  for (const RtValue &v : outs)
    out.append(fromRtValue(v, fw));
  return out;
}

nb::dict statsDict(const runtime::CompiledGraph &cg) {
  const runtime::CompileStats &s = cg.stats();
  nb::dict d;
  d["target_ops"] = s.targetOps;
  d["reference_ops"] = s.referenceOps;
  d["external_ops"] = s.externalOps;
  d["control_flow_ops"] = s.controlFlowOps;
  d["inlined_fusions"] = s.inlinedFusions;
  d["constants"] = s.constants;
  d["arena_bytes"] = s.arenaBytes;
  d["planned_results"] = s.plannedResults;
  d["planned_copies"] = s.plannedCopies;
  d["in_place_separated"] = s.inPlaceSeparated;
  d["fuse_skipped"] = s.fuseSkipped;
  nb::list notCompiled;
  for (const std::string &why : s.notCompiled)
    notCompiled.append(nb::str(why.c_str()));
  d["not_compiled"] = notCompiled;
  return d;
}

} // namespace

void bindRuntime(nb::module_ &m) {
  nb::class_<runtime::CompiledGraph>(
      m, "CompiledGraph",
      "A graph compiled by the runtime for the CPU (thread-safe; run() releases the GIL).")
      .def("run", &runCompiled, "inputs"_a, "framework"_a = "numpy")
      .def_prop_ro("graph", [](const runtime::CompiledGraph &cg) { return cg.graph().clone(); })
      .def_prop_ro("stats", &statsDict)
      .def("dump_files", &runtime::CompiledGraph::dumpFiles);
  m.def("compile", &compileForCpu, "graph"_a, "pipeline"_a = runtime::defaultPipeline(),
        "use_target"_a = true, "keep_text"_a = false);
  // Counters of the process's one backend (libxjit_native.so): xjit.ir.compile's kernels and
  // xjit.jit's.
  m.def("backend_stats", &backend::backendCounters);
  m.def("profile_report", &runtime::profileReport);
  m.def("profile_reset", &runtime::profileReset);
  m.def("set_profile_level", &runtime::setProfileLevel, "level"_a);
}

} // namespace xjit::py
