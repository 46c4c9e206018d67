// Cross-core programs on a split chip (910B): a MIX 1:2 kernel written as
// `if ASCEND_IS_AIC { cube program } else { vector program }` with CrossCoreSetFlag /
// CrossCoreWaitFlag between each AIC and its two AIVs (tests/test_emulator_cross_core.py).
//
//  - pingpong: per group, `tiles` tiles C_t = A_t x B (32 x 32 x 64, half in, float out): the AIC
//    runs Nd2Nz -> LoadData -> Mmad -> Fixpipe into slot t % 2 of the group's 2-slot GM
//    workspace and sets flag 0/1 (mode 2); each AIV waits on it, reads its 16-row half, sets
//    flag 2/3 (mode 2: the AIC's wait passes once both AIVs have read) and writes ReLU(C) out.
//    The AIC waits on flag 2/3 before reusing a slot and drains both at the end. Variants break
//    one rule each (see Variant).
//  - modes: modes 0 (all AICs; all AIVs), 1 (the AIVs of a group) and 2 (AIC <-> AIVs, both ways)
//    as barriers around scalar GM writes and reads.
//
// usage: cross_core pingpong <variant> <groups> <tiles> <range: all|ws|out|off> <dir>
//          reads <dir>/a.bin (groups * tiles * 32 x 64 half), b.bin (64 x 32 half);
//          writes <dir>/out.bin (groups * tiles * 32 x 32 float)
//        cross_core modes <groups> <dir>     writes <dir>/modes.bin (int32, layout at `modes`)
//        cross_core ident <groups> <aivOnly> <dir>  writes <dir>/ident.bin (layout at `ident`)
//   prints "STATS <json>"; exit 3 and "DEVICE_RULE_ERROR <msg>" on a broken rule.
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr uint32_t kM = 32, kN = 32, kK = 64;
constexpr uint32_t kTile = kM * kN;            // floats per workspace slot
constexpr uint32_t kHalfRows = kM / 2;         // rows per AIV
constexpr uint16_t kC2V = 0, kV2C = 2;         // flag of slot s: kC2V + s, kV2C + s

enum Variant : int32_t {
    CORRECT = 0,
    MISSING_WAIT = 1,      // the AIVs read tile 0 without waiting for the AIC's flag
    NO_BACKPRESSURE = 2,   // the AIC reuses a slot without waiting for the AIVs' flag
    DEADLOCK = 3,          // the AIVs first wait on flag 5, which nobody sets
    AIC_TOUCHES_UB = 4,    // the AIC allocates a VECIN tensor
    BAD_FLAG_ID = 5,       // CrossCoreSetFlag(11)
    BAD_MODE = 6,          // CrossCoreSetFlag<3, ...>
    AIC_MODE1 = 7,         // mode 1 (AIV <-> AIV) set on an AIC
    AIV_TOUCHES_L1 = 8,    // an AIV allocates an A1 tensor
    SATURATE = 9,          // 16 sets of one flag that nobody waits for
    UNWAITED = 10,         // one extra set the AIVs never wait for (a warning)
    CROSS_GROUP = 11,      // AIC g sets mode-0 flag 4 + g % 2 once and waits on it: a cycle
                           // through the groups (each waits for another AIC's set), AIVs idle
    WRITE_WRITE = 12,      // both AIVs of a group write their ReLU halves to the same output rows
};

inline uint32_t Blocks(uint32_t len) { return (len + 15) / 16; }

class CubeSide {
 public:
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR ws, int32_t tiles, int32_t variant) {
        const int64_t g = AscendC::GetBlockIdx();
        tiles_ = tiles;
        variant_ = variant;
        aGM.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(a) + g * tiles * kM * kK, uint64_t(tiles) * kM * kK);
        bGM.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(b), kK * kN);
        wsGM.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + g * 2 * kTile, 2 * kTile);
        pipe.InitBuffer(qA1, 1, kM * kK * sizeof(half));
        pipe.InitBuffer(qA2, 1, kM * kK * sizeof(half));
        pipe.InitBuffer(qB1, 1, kK * kN * sizeof(half));
        pipe.InitBuffer(qB2, 1, kK * kN * sizeof(half));
        pipe.InitBuffer(qCO1, 1, kM * kN * sizeof(float));
        if (variant == AIC_TOUCHES_UB) pipe.InitBuffer(qUb, 1, 1024);
    }
    __aicore__ inline void Process() {
        switch (variant_) {
            case AIC_TOUCHES_UB: { auto t = qUb.AllocTensor<float>(); qUb.FreeTensor(t); break; }
            case BAD_FLAG_ID: AscendC::CrossCoreSetFlag<2, PIPE_FIX>(11); break;
            case BAD_MODE: AscendC::CrossCoreSetFlag<3, PIPE_FIX>(kC2V); break;
            case AIC_MODE1: AscendC::CrossCoreSetFlag<1, PIPE_FIX>(kC2V); break;
            case SATURATE:
                for (int i = 0; i < 16; ++i) AscendC::CrossCoreSetFlag<2, PIPE_FIX>(4);
                break;
            case CROSS_GROUP: {
                const uint16_t f = static_cast<uint16_t>(4 + AscendC::GetBlockIdx() % 2);
                AscendC::CrossCoreSetFlag<0, PIPE_S>(f);
                AscendC::CrossCoreWaitFlag(f);
                return;
            }
            default: break;
        }
        const bool backpressure = variant_ != NO_BACKPRESSURE;
        for (int32_t t = 0; t < tiles_; ++t) {
            const uint16_t slot = static_cast<uint16_t>(t % 2);
            if (backpressure && t >= 2) AscendC::CrossCoreWaitFlag(kV2C + slot);  // slot read by both AIVs
            Tile(t, slot);
            AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kC2V + slot);
        }
        if (backpressure) {
            for (int32_t t = tiles_ >= 2 ? tiles_ - 2 : 0; t < tiles_; ++t) {
                AscendC::CrossCoreWaitFlag(kV2C + static_cast<uint16_t>(t % 2));
            }
        }
        if (variant_ == UNWAITED) AscendC::CrossCoreSetFlag<2, PIPE_FIX>(6);
    }

 private:
    __aicore__ inline void Tile(int32_t t, uint16_t slot) {
        auto a1 = qA1.AllocTensor<half>();
        auto b1 = qB1.AllocTensor<half>();
        AscendC::DataCopy(a1, aGM[uint64_t(t) * kM * kK],
                          AscendC::Nd2NzParams(1, kM, kK, 0, kK, static_cast<uint16_t>(Blocks(kM) * 16), 1, 0));
        AscendC::DataCopy(b1, bGM, AscendC::Nd2NzParams(1, kK, kN, 0, kN, static_cast<uint16_t>(Blocks(kK) * 16), 1, 0));
        qA1.EnQue(a1);
        qB1.EnQue(b1);
        a1 = qA1.DeQue<half>();
        auto a2 = qA2.AllocTensor<half>();
        AscendC::LoadData2DParams pa;
        pa.repeatTimes = static_cast<uint8_t>(Blocks(kK));
        pa.srcStride = static_cast<uint16_t>(Blocks(kM));
        pa.ifTranspose = false;
        for (uint32_t i = 0; i < Blocks(kM); ++i) AscendC::LoadData(a2[i * Blocks(kK) * 256], a1[i * 256], pa);
        qA2.EnQue(a2);
        qA1.FreeTensor(a1);
        b1 = qB1.DeQue<half>();
        auto b2 = qB2.AllocTensor<half>();
        AscendC::LoadData2DParams pb;
        pb.repeatTimes = static_cast<uint8_t>(Blocks(kN));
        pb.srcStride = static_cast<uint16_t>(Blocks(kK));
        pb.ifTranspose = true;
        for (uint32_t i = 0; i < Blocks(kK); ++i) AscendC::LoadData(b2[i * Blocks(kN) * 256], b1[i * 256], pb);
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
        fp.srcStride = static_cast<uint16_t>(Blocks(kM) * 16);
        fp.dstStride = kN;
        fp.ndNum = 1;
        AscendC::Fixpipe(wsGM[uint64_t(slot) * kTile], c1, fp);
        qCO1.FreeTensor(c1);
    }

    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::A1, 1> qA1;
    AscendC::TQue<AscendC::TPosition::A2, 1> qA2;
    AscendC::TQue<AscendC::TPosition::B1, 1> qB1;
    AscendC::TQue<AscendC::TPosition::B2, 1> qB2;
    AscendC::TQue<AscendC::TPosition::CO1, 1> qCO1;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> qUb;
    AscendC::GlobalTensor<half> aGM, bGM;
    AscendC::GlobalTensor<float> wsGM;
    int32_t tiles_ = 0, variant_ = 0;
};

class VectorSide {
 public:
    __aicore__ inline void Init(GM_ADDR out, GM_ADDR ws, int32_t tiles, int32_t variant) {
        const int64_t g = AscendC::GetBlockIdx() / AscendC::GetTaskRation();
        sub_ = AscendC::GetSubBlockIdx();
        tiles_ = tiles;
        variant_ = variant;
        outGM.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out) + g * tiles * kTile, uint64_t(tiles) * kTile);
        wsGM.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + g * 2 * kTile, 2 * kTile);
        pipe.InitBuffer(inQ, 1, kHalfRows * kN * sizeof(float));
        pipe.InitBuffer(outQ, 1, kHalfRows * kN * sizeof(float));
        if (variant == AIV_TOUCHES_L1) pipe.InitBuffer(qL1, 1, 1024);
    }
    __aicore__ inline void Process() {
        if (variant_ == AIV_TOUCHES_L1) { auto t = qL1.AllocTensor<half>(); qL1.FreeTensor(t); }
        if (variant_ == CROSS_GROUP) return;
        if (variant_ == DEADLOCK) AscendC::CrossCoreWaitFlag(5);
        const uint32_t elems = kHalfRows * kN;
        for (int32_t t = 0; t < tiles_; ++t) {
            const uint16_t slot = static_cast<uint16_t>(t % 2);
            if (!(variant_ == MISSING_WAIT && t == 0)) AscendC::CrossCoreWaitFlag(kC2V + slot);
            auto x = inQ.AllocTensor<float>();
            AscendC::DataCopy(x, wsGM[uint64_t(slot) * kTile + uint64_t(sub_) * elems], elems);
            inQ.EnQue(x);
            // the slot's half is in the UB: tell the AIC (its wait passes once both AIVs set)
            if (variant_ != NO_BACKPRESSURE) AscendC::CrossCoreSetFlag<2, PIPE_MTE2>(kV2C + slot);
            x = inQ.DeQue<float>();
            auto y = outQ.AllocTensor<float>();
            AscendC::Relu(y, x, elems);
            outQ.EnQue(y);
            inQ.FreeTensor(x);
            y = outQ.DeQue<float>();
            const uint64_t half = variant_ == WRITE_WRITE ? 0 : uint64_t(sub_) * elems;
            AscendC::DataCopy(outGM[uint64_t(t) * kTile + half], y, elems);
            outQ.FreeTensor(y);
        }
    }

 private:
    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> inQ;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> outQ;
    AscendC::TQue<AscendC::TPosition::A1, 1> qL1;
    AscendC::GlobalTensor<float> outGM, wsGM;
    int64_t sub_ = 0;
    int32_t tiles_ = 0, variant_ = 0;
};

}  // namespace

extern "C" __global__ __aicore__ void pingpong(GM_ADDR a, GM_ADDR b, GM_ADDR out, GM_ADDR ws, int32_t tiles,
                                               int32_t variant) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if ASCEND_IS_AIC {
        CubeSide op;
        op.Init(a, b, ws, tiles, variant);
        op.Process();
    } else {
        VectorSide op;
        op.Init(out, ws, tiles, variant);
        op.Process();
    }
}

// modes.bin (int32), G groups: [0, G) AIC values; [G, 3G) AIV values; [3G, 4G) per AIC the sum
// of all AIC values after a mode-0 barrier; [4G, 6G) per AIV the sum of all AIV values after a
// mode-0 barrier; [6G, 8G) AIV values written after that barrier; [8G, 10G) per AIV its
// sibling's value of [6G, 8G) after a mode-1 barrier; [10G, 12G) per AIV its AIC's sum after a
// mode-2 set of the AIC; [12G, 13G) per AIC the sum of its AIVs' values of [6G, 8G) after their
// mode-2 sets. Every read is ordered only by the flag named. [13G, 13G + 8): 8 counters every AIV
// adds 1 to under SetAtomicAdd, unordered (atomic writes are left out of the race check).
extern "C" __global__ __aicore__ void modes(GM_ADDR buf) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const int32_t G = static_cast<int32_t>(AscendC::GetBlockNum());
    AscendC::GlobalTensor<int32_t> v;
    v.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(buf), 13 * G + 8);
    const int32_t i = static_cast<int32_t>(AscendC::GetBlockIdx());
    if ASCEND_IS_AIC {
        v.SetValue(i, 100 + i);
        AscendC::CrossCoreSetFlag<0, PIPE_S>(7);  // every AIC of the launch
        AscendC::CrossCoreWaitFlag(7);
        int32_t sum = 0;
        for (int32_t g = 0; g < G; ++g) sum += v.GetValue(g);
        v.SetValue(3 * G + i, sum);
        AscendC::CrossCoreSetFlag<2, PIPE_S>(9);  // to this group's AIVs
        AscendC::CrossCoreWaitFlag(10);           // passes once both AIVs have set it
        v.SetValue(12 * G + i, v.GetValue(6 * G + 2 * i) + v.GetValue(6 * G + 2 * i + 1));
    } else {
        v.SetValue(G + i, 1000 + i);
        AscendC::CrossCoreSetFlag<0, PIPE_MTE3>(7);  // every AIV of the launch
        AscendC::CrossCoreWaitFlag(7);
        int32_t sum = 0;
        for (int32_t k = 0; k < 2 * G; ++k) sum += v.GetValue(G + k);
        v.SetValue(4 * G + i, sum);
        v.SetValue(6 * G + i, 2000 + i);
        AscendC::CrossCoreSetFlag<1, PIPE_MTE3>(8);  // the two AIVs of the group
        AscendC::CrossCoreWaitFlag(8);
        v.SetValue(8 * G + i, v.GetValue(6 * G + (i ^ 1)));
        AscendC::CrossCoreWaitFlag<2, PIPE_S>(9);
        v.SetValue(10 * G + i, v.GetValue(3 * G + i / 2));
        AscendC::TPipe pipe;
        AscendC::TQue<AscendC::TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 1, 8 * sizeof(int32_t));
        auto ones = q.AllocTensor<int32_t>();
        AscendC::Duplicate(ones, int32_t(1), 8);
        q.EnQue(ones);
        ones = q.DeQue<int32_t>();
        AscendC::SetAtomicAdd<int32_t>();
        AscendC::DataCopy(v[13 * G], ones, 8);
        AscendC::SetAtomicNone();
        q.FreeTensor(ones);
        AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(10);
    }
}

// ident.bin (int32), G groups: [0, 2G) per AIV, [2G, 3G) per AIC (unless aivOnly): 100000 *
// GetBlockNum + 1000 * GetBlockIdx + 100 * GetSubBlockIdx + 10 * GetTaskRation + GetSubBlockNum.
// With aivOnly the kernel has no AIC side (the probe finds nothing to run there).
__aicore__ inline int32_t Ident() {
    return static_cast<int32_t>(100000 * AscendC::GetBlockNum() + 1000 * AscendC::GetBlockIdx() +
                                100 * AscendC::GetSubBlockIdx() + 10 * AscendC::GetTaskRation() +
                                AscendC::GetSubBlockNum());
}
extern "C" __global__ __aicore__ void ident(GM_ADDR buf, int32_t aivOnly) {
    const int64_t G = AscendC::GetBlockNum();
    AscendC::GlobalTensor<int32_t> v;
    v.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(buf), 3 * G);
    if (aivOnly) {
        if ASCEND_IS_AIV { v.SetValue(AscendC::GetBlockIdx(), Ident()); }
        return;
    }
    if ASCEND_IS_AIC {
        v.SetValue(2 * G + AscendC::GetBlockIdx(), Ident());
    } else {
        v.SetValue(AscendC::GetBlockIdx(), Ident());
    }
}


static int RunPingPong(int argc, char** argv) {
    if (argc != 7) return 2;
    const int32_t variant = std::atoi(argv[2]), groups = std::atoi(argv[3]), tiles = std::atoi(argv[4]);
    const std::string range = argv[5], dir = argv[6];
    const size_t aBytes = size_t(groups) * tiles * kM * kK * sizeof(half), bBytes = kK * kN * sizeof(half);
    const size_t outBytes = size_t(groups) * tiles * kTile * sizeof(float), wsBytes = size_t(groups) * 2 * kTile * 4;
    uint8_t* a = (uint8_t*)AscendC::GmAlloc(aBytes);
    uint8_t* b = (uint8_t*)AscendC::GmAlloc(bBytes);
    uint8_t* out = (uint8_t*)AscendC::GmAlloc(outBytes);
    uint8_t* ws = (uint8_t*)AscendC::GmAlloc(wsBytes);
    if (!ReadFile(dir + "/a.bin", a, aBytes) || !ReadFile(dir + "/b.bin", b, bBytes)) return 2;
    if (range == "off") AscendC::emu::SetCrossCoreRaceCheck(false);
    if (range == "ws") AscendC::emu::SetCrossCoreRaceRange(ws, wsBytes);
    if (range == "out") AscendC::emu::SetCrossCoreRaceRange(out, outBytes);
    AscendC::SetKernelMode(KernelMode::MIX_MODE);
    try {
        ICPU_RUN_KF(pingpong, groups, a, b, out, ws, tiles, variant);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    WriteFile(dir + "/out.bin", out, outBytes);
    AscendC::GmFree(a);
    AscendC::GmFree(b);
    AscendC::GmFree(out);
    AscendC::GmFree(ws);
    return 0;
}

static int RunModes(int argc, char** argv) {
    if (argc != 4) return 2;
    const int32_t groups = std::atoi(argv[2]);
    const std::string dir = argv[3];
    const size_t bytes = (size_t(13) * groups + 8) * sizeof(int32_t);
    uint8_t* buf = (uint8_t*)AscendC::GmAlloc(bytes);
    AscendC::SetKernelMode(KernelMode::MIX_MODE);
    try {
        ICPU_RUN_KF(modes, groups, buf);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    WriteFile(dir + "/modes.bin", buf, bytes);
    AscendC::GmFree(buf);
    return 0;
}

static int RunIdent(int argc, char** argv) {
    if (argc != 5) return 2;
    const int32_t groups = std::atoi(argv[2]), aivOnly = std::atoi(argv[3]);
    const size_t bytes = size_t(3) * groups * sizeof(int32_t);
    uint8_t* buf = (uint8_t*)AscendC::GmAlloc(bytes);
    AscendC::SetKernelMode(KernelMode::MIX_MODE);
    ICPU_RUN_KF(ident, groups, buf, aivOnly);
    PrintStats();
    WriteFile(std::string(argv[4]) + "/ident.bin", buf, bytes);
    AscendC::GmFree(buf);
    return 0;
}

int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "pingpong") return RunPingPong(argc, argv);
    if (cmd == "modes") return RunModes(argc, argv);
    if (cmd == "ident") return RunIdent(argc, argv);
    std::fprintf(stderr, "usage: cross_core pingpong|modes ...\n");
    return 2;
}
