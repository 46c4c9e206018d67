// Minimal ACL declarations for a g++ -fsyntax-only check of the printed NPU launchers.
// Test-only: these are declarations (no definitions), written from the ACL signatures in
// shared/reference/ascendc.md 5.3; nothing here is linked or run. CANN's real acl/acl.h
// replaces this header in a device build; tests/test_acl_headers.py holds every declaration
// here equal to the real headers' (and compiles the launchers against those) where they exist.
#ifndef TVM_ASCEND_TEST_ACL_STUB_H_
#define TVM_ASCEND_TEST_ACL_STUB_H_

#include <cstddef>
#include <cstdint>

typedef int aclError;
typedef void* aclrtStream;
typedef void* aclrtEvent;

static const aclError ACL_SUCCESS = 0;
static const aclError ACL_ERROR_REPEAT_INITIALIZE = 100002;

typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
  ACL_MEM_MALLOC_HUGE_ONLY = 1,
  ACL_MEM_MALLOC_NORMAL_ONLY = 2,
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
} aclrtMemcpyKind;

extern "C" {
aclError aclInit(const char* configPath);
aclError aclFinalize();
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDeviceCount(uint32_t* count);
aclError aclrtCreateStream(aclrtStream* stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void* devPtr);
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind kind);
aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                          aclrtStream stream);
aclError aclrtCreateEvent(aclrtEvent* event);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent);
}

#endif  // TVM_ASCEND_TEST_ACL_STUB_H_
