// Atomic adds to GM (SetAtomicAdd<T> / SetAtomicNone) and their checks
// (tests/test_emulator_atomic.py):
//  - copy: every block copies the same `count` elements of T (64 bytes) from src into dst through
//    the UB; `variant` says how (see Variant). dst then holds what the writes made of it.
//  - fixpipe: AIC_MODE; every block computes A x B (16 x 32 half times 32 x 16 half, float L0C)
//    and Fixpipes it into one 16 x 16 float output under SetAtomicAdd<float> (or plain).
//  - mix: MIX 1:2 on 910B; both AIVs of group g atomically add their 16 floats to out[16g, 16g + 16);
//    the group's AIC then reads or writes out[16g] as `variant` says (ordered by a mode-2 flag or not).
//
// usage: atomic copy <dtype: half|float|int16|int32|int8|bf16> <variant> <blocks> <dir>
//          reads <dir>/src.bin (64 bytes), <dir>/dst.bin (4 * 64 bytes, the output's start);
//          writes <dir>/dst.bin
//        atomic fixpipe <atomic: 0|1> <blocks> <dir>   reads a.bin, b.bin; writes c.bin (float)
//        atomic mix <variant> <groups> <dir>           writes <dir>/out.bin (float, 17 * groups)
//   prints "STATS <json>"; exit 3 and "DEVICE_RULE_ERROR <msg>" on a broken rule.
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

enum Variant : int32_t {
    ATOMIC = 0,      // SetAtomicAdd<T>, DataCopy to dst, SetAtomicNone: dst += blocks * src
    PLAIN = 1,       // plain DataCopy from every block to dst: an overlap
    MIXED = 2,       // block 0 writes dst plainly, the others add to it: an overlap
    MISMATCH = 3,    // SetAtomicAdd<float> active while T (half) is copied
    LEFT_ON = 4,     // SetAtomicAdd<T> never cleared: a warning
    THEN_PLAIN = 5,  // add to dst, SetAtomicNone, then a plain copy to the block's own slot
    SAME_BLOCK = 6,  // block b writes slot b plainly, then adds to it: no other block touches it
};
constexpr uint32_t kBytes = 64;

template <typename T>
__aicore__ inline void CopyKernel(GM_ADDR src, GM_ADDR dst, int32_t variant) {
    constexpr uint32_t count = kBytes / sizeof(T);
    const int64_t b = AscendC::GetBlockIdx();
    AscendC::GlobalTensor<T> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(src), count);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dst), uint64_t(count) * (1 + AscendC::GetBlockNum()));
    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, kBytes);
    auto t = q.AllocTensor<T>();
    AscendC::DataCopy(t, s, count);
    q.EnQue(t);
    t = q.DeQue<T>();
    switch (variant) {
        case PLAIN: AscendC::DataCopy(d, t, count); break;
        case MIXED:
            if (b != 0) AscendC::SetAtomicAdd<T>();
            AscendC::DataCopy(d, t, count);
            AscendC::SetAtomicNone();
            break;
        case MISMATCH:
            AscendC::SetAtomicAdd<float>();
            AscendC::DataCopy(d, t, count);
            AscendC::SetAtomicNone();
            break;
        case LEFT_ON:
            AscendC::SetAtomicAdd<T>();
            AscendC::DataCopy(d, t, count);
            break;
        case THEN_PLAIN:
            AscendC::SetAtomicAdd<T>();
            AscendC::DataCopy(d, t, count);
            AscendC::SetAtomicNone();
            AscendC::DataCopy(d[uint64_t(count) * (1 + b)], t, count);
            break;
        case SAME_BLOCK:
            AscendC::DataCopy(d[uint64_t(count) * (1 + b)], t, count);
            AscendC::SetAtomicAdd<T>();
            AscendC::DataCopy(d[uint64_t(count) * (1 + b)], t, count);
            AscendC::SetAtomicNone();
            break;
        default:
            AscendC::SetAtomicAdd<T>();
            AscendC::DataCopy(d, t, count);
            AscendC::SetAtomicNone();
    }
    q.FreeTensor(t);
}

}  // namespace

extern "C" __global__ __aicore__ void copy_half(GM_ADDR s, GM_ADDR d, int32_t v) { CopyKernel<half>(s, d, v); }
extern "C" __global__ __aicore__ void copy_float(GM_ADDR s, GM_ADDR d, int32_t v) { CopyKernel<float>(s, d, v); }
extern "C" __global__ __aicore__ void copy_int16(GM_ADDR s, GM_ADDR d, int32_t v) { CopyKernel<int16_t>(s, d, v); }
extern "C" __global__ __aicore__ void copy_int32(GM_ADDR s, GM_ADDR d, int32_t v) { CopyKernel<int32_t>(s, d, v); }
extern "C" __global__ __aicore__ void copy_int8(GM_ADDR s, GM_ADDR d, int32_t v) { CopyKernel<int8_t>(s, d, v); }
extern "C" __global__ __aicore__ void copy_bf16(GM_ADDR s, GM_ADDR d, int32_t v) {
    CopyKernel<bfloat16_t>(s, d, v);
}

namespace {
constexpr uint32_t kM = 16, kN = 16, kK = 32;
}

// C (16 x 16 float) += A x B on every block, by Fixpipe under SetAtomicAdd<float> when `atomic`.
extern "C" __global__ __aicore__ void fixpipe(GM_ADDR a, GM_ADDR b, GM_ADDR c, int32_t atomic) {
    AscendC::GlobalTensor<half> aGM, bGM;
    AscendC::GlobalTensor<float> cGM;
    aGM.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(a), kM * kK);
    bGM.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(b), kK * kN);
    cGM.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(c), kM * kN);
    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::A1, 1> qA1;
    AscendC::TQue<AscendC::TPosition::A2, 1> qA2;
    AscendC::TQue<AscendC::TPosition::B1, 1> qB1;
    AscendC::TQue<AscendC::TPosition::B2, 1> qB2;
    AscendC::TQue<AscendC::TPosition::CO1, 1> qCO1;
    pipe.InitBuffer(qA1, 1, kM * kK * sizeof(half));
    pipe.InitBuffer(qA2, 1, kM * kK * sizeof(half));
    pipe.InitBuffer(qB1, 1, kK * kN * sizeof(half));
    pipe.InitBuffer(qB2, 1, kK * kN * sizeof(half));
    pipe.InitBuffer(qCO1, 1, kM * kN * sizeof(float));
    auto a1 = qA1.AllocTensor<half>();
    auto b1 = qB1.AllocTensor<half>();
    AscendC::DataCopy(a1, aGM, AscendC::Nd2NzParams(1, kM, kK, 0, kK, kM, 1, 0));
    AscendC::DataCopy(b1, bGM, AscendC::Nd2NzParams(1, kK, kN, 0, kN, kK, 1, 0));
    qA1.EnQue(a1);
    qB1.EnQue(b1);
    a1 = qA1.DeQue<half>();
    auto a2 = qA2.AllocTensor<half>();
    AscendC::LoadData2DParams pa;
    pa.repeatTimes = kK / 16;
    pa.srcStride = kM / 16;
    pa.ifTranspose = false;
    AscendC::LoadData(a2, a1, pa);
    qA2.EnQue(a2);
    qA1.FreeTensor(a1);
    b1 = qB1.DeQue<half>();
    auto b2 = qB2.AllocTensor<half>();
    AscendC::LoadData2DParams pb;
    pb.repeatTimes = kN / 16;
    pb.srcStride = kK / 16;
    pb.ifTranspose = true;
    for (uint32_t i = 0; i < kK / 16; ++i) AscendC::LoadData(b2[i * (kN / 16) * 256], b1[i * 256], pb);
    qB2.EnQue(b2);
    qB1.FreeTensor(b1);
    a2 = qA2.DeQue<half>();
    b2 = qB2.DeQue<half>();
    auto c1 = qCO1.AllocTensor<float>();
    AscendC::MmadParams mp;
    mp.m = kM;
    mp.n = kN;
    mp.k = kK;
    AscendC::Mmad(c1, a2, b2, mp);
    qCO1.EnQue(c1);
    qA2.FreeTensor(a2);
    qB2.FreeTensor(b2);
    c1 = qCO1.DeQue<float>();
    AscendC::FixpipeParamsV220 fp;
    fp.nSize = kN;
    fp.mSize = kM;
    fp.srcStride = kM;
    fp.dstStride = kN;
    fp.ndNum = 1;
    if (atomic) AscendC::SetAtomicAdd<float>();
    AscendC::Fixpipe(cGM, c1, fp);
    if (atomic) AscendC::SetAtomicNone();
    qCO1.FreeTensor(c1);
}

namespace {
enum MixVariant : int32_t {
    MIX_ORDERED = 0,     // the AIC waits for both AIVs' mode-2 flag, then reads the sum
    MIX_READ_RACE = 1,   // the AIC reads the sum without waiting
    MIX_WRITE_RACE = 2,  // the AIC writes out[0] plainly without waiting
};
}

// out[16g, 16g + 16) (float, zeroed by the host) += 1 from each AIV of group g under
// SetAtomicAdd<float>, unordered between the two; the group's AIC then writes
// out[16G + g] = out[16g] (or races, by variant).
extern "C" __global__ __aicore__ void mix(GM_ADDR out, int32_t variant) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const int32_t G = static_cast<int32_t>(AscendC::GetBlockNum());
    AscendC::GlobalTensor<float> v;
    v.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out), 17 * G);
    const int64_t g = AscendC::GetBlockIdx() / AscendC::GetTaskRation();
    if ASCEND_IS_AIC {
        if (variant == MIX_WRITE_RACE) {
            v.SetValue(16 * g, 5.0f);
            return;
        }
        if (variant == MIX_ORDERED) AscendC::CrossCoreWaitFlag(3);  // passes once both AIVs set it
        v.SetValue(16 * G + g, v.GetValue(16 * g));
    } else {
        AscendC::TPipe pipe;
        AscendC::TQue<AscendC::TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 1, 16 * sizeof(float));
        auto ones = q.AllocTensor<float>();
        AscendC::Duplicate(ones, 1.0f, 16);
        q.EnQue(ones);
        ones = q.DeQue<float>();
        AscendC::SetAtomicAdd<float>();
        AscendC::DataCopy(v[16 * g], ones, 16);
        AscendC::SetAtomicNone();
        q.FreeTensor(ones);
        if (variant == MIX_ORDERED) AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(3);
    }
}


#define RUN_OR_REPORT(...)                                        \
    try {                                                         \
        __VA_ARGS__;                                              \
    } catch (const AscendC::emu::DeviceRuleError& e) {            \
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());          \
        return 3;                                                 \
    }

static int RunCopy(int argc, char** argv) {
    if (argc != 6) return 2;
    const std::string dtype = argv[2], dir = argv[5];
    const int32_t variant = std::atoi(argv[3]), blocks = std::atoi(argv[4]);
    const size_t dstBytes = size_t(kBytes) * (1 + blocks);
    uint8_t* src = (uint8_t*)AscendC::GmAlloc(kBytes);
    uint8_t* dst = (uint8_t*)AscendC::GmAlloc(dstBytes);
    if (!ReadFile(dir + "/src.bin", src, kBytes) || !ReadFile(dir + "/dst.bin", dst, dstBytes)) return 2;
    AscendC::SetKernelMode(KernelMode::AIV_MODE);
    if (dtype == "half") { RUN_OR_REPORT(ICPU_RUN_KF(copy_half, blocks, src, dst, variant)); }
    else if (dtype == "float") { RUN_OR_REPORT(ICPU_RUN_KF(copy_float, blocks, src, dst, variant)); }
    else if (dtype == "int16") { RUN_OR_REPORT(ICPU_RUN_KF(copy_int16, blocks, src, dst, variant)); }
    else if (dtype == "int32") { RUN_OR_REPORT(ICPU_RUN_KF(copy_int32, blocks, src, dst, variant)); }
    else if (dtype == "int8") { RUN_OR_REPORT(ICPU_RUN_KF(copy_int8, blocks, src, dst, variant)); }
    else if (dtype == "bf16") { RUN_OR_REPORT(ICPU_RUN_KF(copy_bf16, blocks, src, dst, variant)); }
    else return 2;
    PrintStats();
    WriteFile(dir + "/dst.bin", dst, dstBytes);
    AscendC::GmFree(src);
    AscendC::GmFree(dst);
    return 0;
}

static int RunFixpipe(int argc, char** argv) {
    if (argc != 5) return 2;
    const int32_t atomic = std::atoi(argv[2]), blocks = std::atoi(argv[3]);
    const std::string dir = argv[4];
    uint8_t* a = (uint8_t*)AscendC::GmAlloc(kM * kK * sizeof(half));
    uint8_t* b = (uint8_t*)AscendC::GmAlloc(kK * kN * sizeof(half));
    uint8_t* c = (uint8_t*)AscendC::GmAlloc(kM * kN * sizeof(float));
    if (!ReadFile(dir + "/a.bin", a, kM * kK * sizeof(half)) || !ReadFile(dir + "/b.bin", b, kK * kN * sizeof(half))) {
        return 2;
    }
    std::memset(c, 0, kM * kN * sizeof(float));
    AscendC::SetKernelMode(KernelMode::AIC_MODE);
    RUN_OR_REPORT(ICPU_RUN_KF(fixpipe, blocks, a, b, c, atomic));
    PrintStats();
    WriteFile(dir + "/c.bin", c, kM * kN * sizeof(float));
    AscendC::GmFree(a);
    AscendC::GmFree(b);
    AscendC::GmFree(c);
    return 0;
}

static int RunMix(int argc, char** argv) {
    if (argc != 5) return 2;
    const int32_t variant = std::atoi(argv[2]), groups = std::atoi(argv[3]);
    const size_t bytes = size_t(17) * groups * sizeof(float);
    uint8_t* out = (uint8_t*)AscendC::GmAlloc(bytes);
    std::memset(out, 0, bytes);
    AscendC::SetKernelMode(KernelMode::MIX_MODE);
    RUN_OR_REPORT(ICPU_RUN_KF(mix, groups, out, variant));
    PrintStats();
    WriteFile(std::string(argv[4]) + "/out.bin", out, bytes);
    AscendC::GmFree(out);
    return 0;
}

int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "copy") return RunCopy(argc, argv);
    if (cmd == "fixpipe") return RunFixpipe(argc, argv);
    if (cmd == "mix") return RunMix(argc, argv);
    std::fprintf(stderr, "usage: atomic copy|fixpipe|mix ...\n");
    return 2;
}
