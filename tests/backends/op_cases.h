// The one table of op cases that every backend runs against the reference backend, after ggml's
// tests/test-backend-ops.cpp: each case runs an op (through core/ops.h) on seeded inputs, once on
// the reference backend in F32 with its floating inputs rounded to the dtype under test, once on
// the backend under test with them in that dtype, and compares the outputs within the case's
// tolerance for the dtype. tests/backends/test_backend_ops.cpp runs the table on the host
// backends of the registry, tests/cuda/test_cuda_ops.cpp on CUDA in F32, F16 and BF16.
//
// Each (group, dtype) is one gtest, <suite>.<Group>/<DTYPE> (CpuOps.RmsNorm/F32,
// CudaOps.Conv1d/BF16). A case the backend cannot run (Backend::supports is false for an op it
// needs) is skipped, and said so by name in the test's output; a test none of whose cases ran
// is reported as skipped. Adding an op: add its cases to op_cases.cpp with the op's OpKind; it
// then runs on every backend that supports it, and is reported as skipped on the others.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace voxd::testing {

// One input of a case: seeded uniform values in [lo, hi) of a shape, a given host tensor
// (hand-picked values, ids, boundaries), or none (an undefined tensor, e.g. no bias). Floating
// inputs reach the backend under test in the dtype under test (and the reference rounded to it);
// integer inputs stay on the host unless on_device.
struct CaseInput {
  Shape shape;
  uint32_t seed = 0;
  float lo = -1.0f;
  float hi = 1.0f;
  Tensor given;
  bool none = false;
  bool on_device = false;
};
CaseInput random(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
CaseInput given(const Tensor& tensor);
// An integer tensor the backend under test gets on its device (e.g. ids already there).
CaseInput given_on_device(const Tensor& tensor);
CaseInput none();

// The largest error a case allows: in F32 |a − e| / max(1, |e|) per element; in F16 and BF16
// max |a − e| / max(1, max |e|), relative to the output's scale (one rounding of an
// intermediate larger than an element is already a large error relative to that element).
struct Tolerance {
  double f32 = 1e-4;
  double half = 1e-2;
};

// Runs the case's op on `ctx` with the inputs (in the case's order) and returns its output.
using CaseRun = std::function<Tensor(Context& ctx, const std::vector<Tensor>& in)>;

struct OpCase {
  std::string group;          // the test it is part of, e.g. "Conv1d"
  std::vector<OpKind> needs;  // every op the run calls; a backend lacking one skips the case
  std::string description;    // what it runs, for messages: "conv1d B2 Cin4 ... g2 bias"
  std::vector<CaseInput> inputs;
  CaseRun run;
  Tolerance tolerance;
  // The dtypes it runs in (F32-only ops: F32).
  std::vector<DType> dtypes = {DType::F32, DType::F16, DType::BF16};
  bool allow_nan = false;  // NaN must then match the reference's NaN element for element
  bool exact = false;      // integer outputs: equal element for element
  // Sized for a device's chunking paths (tens of thousands of steps): the reference takes
  // seconds on them, so host runs leave them out (saying so).
  bool large = false;
  // Non-empty: the run must throw a voxd::Error whose message contains this, on the reference
  // and on the backend under test alike.
  std::string error;
};

// The table, built on first use.
const std::vector<OpCase>& op_cases();

// One backend for register_op_table.
struct OpTableTarget {
  std::string suite;                      // the gtest suite: "CpuOps"
  std::function<Backend&()> backend;      // made on first use (listing tests makes none)
  std::function<Allocator&()> allocator;  // the backend's device memory, NaN-poisoned if it can
  std::vector<DType> dtypes;              // the dtypes to run the table in
  bool include_large = false;             // whether to run the large cases
};

// Registers one gtest per (group, dtype) of the table for `target`. Call before RUN_ALL_TESTS,
// e.g. from a namespace-scope initializer. With VOXD_OP_CASES set in the environment, a test runs
// only the cases whose description contains it (a sanitizer's run of a few).
void register_op_table(const OpTableTarget& target);

// The gtest name of an op: op_name in CamelCase ("conv_transpose1d" -> "ConvTranspose1d").
std::string group_name(OpKind op);

// Checks, on `ctx`'s backend, conversions to and from F16 and BF16 against bit patterns known
// independently of voxd's conversion helpers: exact values, round-to-nearest-even ties, overflow
// to infinity, subnormals, signed zero, NaN; through contiguous and strided copies, host to
// device and back.
void check_dtype_conversions(Context& ctx);

}  // namespace voxd::testing
