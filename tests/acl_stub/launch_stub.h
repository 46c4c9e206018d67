// Test-only: g++ cannot parse bisheng's kernel<<<blockDim, l2ctrl, stream>>>(args) launch, so the
// syntax check rewrites each launch as ``tvm_ascend_stub_launch(blockDim, l2ctrl, stream),
// kernel(args)``: the launch configuration and the kernel's argument list are still type-checked.
#ifndef TVM_ASCEND_TEST_LAUNCH_STUB_H_
#define TVM_ASCEND_TEST_LAUNCH_STUB_H_
#include <cstdint>
#include <acl/acl.h>  // <>: from the -I folder given (stub or real), not this one
void tvm_ascend_stub_launch(uint32_t blockDim, void* l2ctrl, aclrtStream stream);
#endif  // TVM_ASCEND_TEST_LAUNCH_STUB_H_
