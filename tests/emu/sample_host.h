// Host-side helpers the emulator test programs share: the binary files the pytest drivers
// write and read back, and the one-line launch statistics they parse ("STATS <json>").
// Include after kernel_operator.h (PrintStats reads the emulator's last launch). `inline`, not
// `static`: a program that uses only some of them builds without -Wunused-function warnings,
// which the split build treats as failures.
#ifndef TVM_ASCEND_TESTS_EMU_SAMPLE_HOST_H
#define TVM_ASCEND_TESTS_EMU_SAMPLE_HOST_H

#include <cstdio>
#include <string>

// Reads exactly `bytes` bytes of `path` into `buf`; false when the file is missing or short.
inline bool ReadFile(const std::string& path, void* buf, size_t bytes) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return false;
    size_t got = std::fread(buf, 1, bytes, f);
    std::fclose(f);
    return got == bytes;
}

// Writes `bytes` bytes of `buf` to `path`; false when it cannot be opened or written whole.
inline bool WriteFile(const std::string& path, const void* buf, size_t bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    size_t put = std::fwrite(buf, 1, bytes, f);
    std::fclose(f);
    return put == bytes;
}

inline void PrintStats() { std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str()); }

#endif  // TVM_ASCEND_TESTS_EMU_SAMPLE_HOST_H
