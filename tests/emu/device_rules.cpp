// Device-rule and counter cases for the emulator: each rule case is a small kernel body that
// breaks (or, for the *_ok / warning cases, exercises) one rule; test_emulator.py asserts the
// messages. The counter kernels (copy_kernel, scalar_kernel, pad_kernel) move known byte counts.
//
// usage: device_rules <case> [block_dim]
//        device_rules count_copy <in_bytes> <out_bytes> <block_dim> | count_scalar | count_pad
//   exit 0 and "STATS <json>" on success, exit 3 and "DEVICE_RULE_ERROR <msg>" on a broken rule,
//   exit 4 and "INVALID_ARGUMENT <msg>" for bad emulator settings.
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

using namespace AscendC;

static std::string g_case;

struct Gm {
    GlobalTensor<float> x, z;
    Gm(GM_ADDR xp, GM_ADDR zp) {
        x.SetGlobalBuffer((__gm__ float*)xp, 256);
        z.SetGlobalBuffer((__gm__ float*)zp, 256);
    }
};
using Case = std::function<void(GM_ADDR, GM_ADDR)>;

static void Print(const char* tag, const LocalTensor<float>& t, uint32_t n) {
    std::printf("%s", tag);
    for (uint32_t i = 0; i < n; ++i) std::printf(" %g", t.GetValue(i));
    std::printf("\n");
}

static const std::map<std::string, Case>& Cases() {
    static const std::map<std::string, Case> cases = {
        {"ub_capacity", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 2, 100 * 1024);
         }},
        {"buffer_count", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 65, 32);
         }},
        {"max_live", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 9, 32);
             for (int i = 0; i < 9; ++i) q.AllocTensor<float>();
         }},
        {"datacopy_unaligned", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, 10);  // 40 B: the device moves 32 B
             q.EnQue(t);
             t = q.DeQue<float>();
             DataCopy(g.z, t, 16);
             q.FreeTensor(t);
         }},
        {"misaligned", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 1024);
             LocalTensor<float> t = b.Get<float>();
             Duplicate(t[1], 1.0f, 8);
         }},
        {"oob_vector", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 256);
             LocalTensor<float> t = b.Get<float>();
             Add(t, t, t, 128);
         }},
        {"oob_getvalue", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 256);
             LocalTensor<float> t = b.Get<float>();
             (void)t.GetValue(64);
         }},
        {"oob_datacopy", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, 32);
         }},
        {"oob_datacopypad", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopyPad(t, g.x, DataCopyExtParams(2, 40, 0, 0, 0), DataCopyPadExtParams<float>());
         }},
        {"gm_setglobal", [](GM_ADDR xp, GM_ADDR) {
             GlobalTensor<float> x;
             x.SetGlobalBuffer((__gm__ float*)xp, 16);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 128);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, x, 32);
         }},
        {"gm_alloc", [](GM_ADDR xp, GM_ADDR) {
             GlobalTensor<float> x;
             x.SetGlobalBuffer((__gm__ float*)xp + 248);  // no size: only the GmAlloc range limits it
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, x, 16);
         }},
        {"deque_empty", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 2, 64);
             (void)q.DeQue<float>();
         }},
        {"enque_depth", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 2, 64);
             LocalTensor<float> a = q.AllocTensor<float>(), b = q.AllocTensor<float>();
             q.EnQue(a);
             q.EnQue(b);
         }},
        {"vecin_no_sync", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, 16);
             Adds(t, t, 1.0f, 16);  // no EnQue/DeQue in between
         }},
        {"vecout_no_sync", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECOUT, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             Duplicate(t, 1.0f, 16);
             DataCopy(g.z, t, 16);  // no EnQue/DeQue in between
         }},
        {"use_after_free", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, 16);
             q.EnQue(t);
             t = q.DeQue<float>();
             q.FreeTensor(t);
             Adds(t, t, 1.0f, 16);
         }},
        {"double_free", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             q.FreeTensor(t);
             q.FreeTensor(t);
         }},
        {"free_other_queue", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q1, q2;
             pipe.InitBuffer(q1, 1, 64);
             pipe.InitBuffer(q2, 1, 64);
             LocalTensor<float> t = q1.AllocTensor<float>();
             q2.FreeTensor(t);
         }},
        {"gm_overlap", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECOUT, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             Duplicate(t, static_cast<float>(GetBlockIdx()), 8);
             q.EnQue(t);
             t = q.DeQue<float>();
             DataCopy(g.z, t, 8);  // every block writes z[0..8)
             q.FreeTensor(t);
         }},
        {"poison", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(q, 1, 64);
             pipe.InitBuffer(b, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             LocalTensor<half> h = b.Get<half>();
             std::printf("POISON %08x %04x %d\n", t.ReinterpretCast<uint32_t>().GetValue(0),
                         h.ReinterpretCast<uint16_t>().GetValue(3), std::isnan(t.GetValue(5)) ? 1 : 0);
             q.FreeTensor(t);
         }},
        {"flag_unset", [](GM_ADDR, GM_ADDR) { WaitFlag<HardEvent::MTE2_V>(0); }},
        {"flag_range", [](GM_ADDR, GM_ADDR) { SetFlag<HardEvent::V_S>(8); }},
        {"flag_twice", [](GM_ADDR, GM_ADDR) {
             SetFlag<HardEvent::V_MTE3>(1);
             SetFlag<HardEvent::V_MTE3>(1);
         }},
        {"flag_ok", [](GM_ADDR xp, GM_ADDR zp) {  // TBuf + explicit flags instead of queues
             Gm g(xp, zp);
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 64);
             LocalTensor<float> t = b.Get<float>();
             DataCopy(t, g.x, 16);
             SetFlag<HardEvent::MTE2_V>(0);
             WaitFlag<HardEvent::MTE2_V>(0);
             Adds(t, t, 1.0f, 16);
             SetFlag<HardEvent::V_MTE3>(0);
             WaitFlag<HardEvent::V_MTE3>(0);
             DataCopy(g.z, t, 16);
         }},
        {"vector_on_l1", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::A1, 1> q;
             pipe.InitBuffer(q, 1, 256);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, 64);  // GM -> L1 is fine
             q.EnQue(t);
             t = q.DeQue<float>();
             Muls(t, t, 2.0f, 64);  // the vector unit cannot read L1
         }},
        {"barrier_s", [](GM_ADDR, GM_ADDR) { PipeBarrier<PIPE_S>(); }},
        {"thread_error", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             if (GetBlockIdx() == 3) (void)q.DeQue<float>();
         }},
        {"compare_256", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b, m;
             pipe.InitBuffer(b, 256);
             pipe.InitBuffer(m, 32);
             LocalTensor<float> t = b.Get<float>();
             Duplicate(t, 0.0f, 64);
             Compare(m.Get<uint8_t>(), t, t, CMPMODE::LT, 10);
         }},
        {"ub_reserve", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 190000);
         }},
        {"leak", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             (void)q.AllocTensor<float>();
         }},
        {"getwithoffset", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 256);
             (void)b.GetWithOffset<float>(8, 16);
         }},
        {"burst_params", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64);
             LocalTensor<float> t = q.AllocTensor<float>();
             DataCopy(t, g.x, DataCopyParams(0, 1, 0, 0));
         }},
        {"tmp_overlap", [](GM_ADDR, GM_ADDR) {
             TPipe pipe;
             TBuf<TPosition::VECCALC> b;
             pipe.InitBuffer(b, 512);
             LocalTensor<float> t = b.Get<float>();
             Duplicate(t, 0.5f, 64);
             Sigmoid(t, t, b.Get<uint8_t>(), 64);
         }},
        {"dcpad_semantics", [](GM_ADDR xp, GM_ADDR zp) {
             Gm g(xp, zp);
             TPipe pipe;
             TQue<QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 256);
             LocalTensor<float> t = q.AllocTensor<float>();
             // 2 bursts of 5 floats, 1 float of padding each side (value 7), GM gap 4 B
             DataCopyPad(t, g.x, DataCopyExtParams(2, 20, 4, 0, 0), DataCopyPadExtParams<float>(true, 1, 1, 7.0f));
             // no padding: the dummy tail repeats the burst's first element
             DataCopyPad(t[16], g.x[100], DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams<float>());
             // padding without isPad: padding and dummy are garbage (poison)
             DataCopyPad(t[24], g.x[200], DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams<float>(false, 1, 0, 7.0f));
             q.EnQue(t);
             t = q.DeQue<float>();
             Print("UB", t, 32);
             // UB -> GM: 2 bursts of 3 floats from 32-byte aligned UB rows, GM gap 8 B
             DataCopyPad(g.z, t, DataCopyExtParams(2, 12, 0, 8, 0));
             q.FreeTensor(t);
         }},
    };
    return cases;
}

extern "C" __global__ __aicore__ void rules_kernel(GM_ADDR x, GM_ADDR z) {
    Cases().at(g_case)(x, z);
}

// ------------------------------------------------------------------ counter kernels
struct CounterTiling {
    uint32_t inBytes;
    uint32_t outBytes;
};

extern "C" __global__ __aicore__ void copy_kernel(GM_ADDR x, GM_ADDR z, GM_ADDR tiling) {
    CounterTiling t = *reinterpret_cast<__gm__ CounterTiling*>(tiling);
    const uint32_t inElems = t.inBytes / sizeof(float), outElems = t.outBytes / sizeof(float);
    GlobalTensor<float> xGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float*)x + GetBlockIdx() * inElems, inElems);
    zGm.SetGlobalBuffer((__gm__ float*)z + GetBlockIdx() * outElems, outElems);
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> inQueue;
    TQue<QuePosition::VECOUT, 1> outQueue;
    pipe.InitBuffer(inQueue, 1, t.inBytes);
    pipe.InitBuffer(outQueue, 1, t.outBytes);
    LocalTensor<float> in = inQueue.AllocTensor<float>();
    DataCopy(in, xGm, inElems);
    inQueue.EnQue(in);
    in = inQueue.DeQue<float>();
    LocalTensor<float> out = outQueue.AllocTensor<float>();
    Duplicate(out, 1.0f, static_cast<int32_t>(outElems));
    outQueue.EnQue(out);
    inQueue.FreeTensor(in);
    out = outQueue.DeQue<float>();
    DataCopy(zGm, out, outElems);
    outQueue.FreeTensor(out);
}

extern "C" __global__ __aicore__ void scalar_kernel(GM_ADDR x, GM_ADDR z) {
    GlobalTensor<float> xGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    zGm.SetGlobalBuffer((__gm__ float*)z + 2 * GetBlockIdx(), 2);
    float s = xGm.GetValue(0) + xGm.GetValue(1) + xGm.GetValue(2);
    zGm.SetValue(0, s);
    zGm.SetValue(1, s);
}

extern "C" __global__ __aicore__ void pad_kernel(GM_ADDR x, GM_ADDR z) {
    GlobalTensor<float> xGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    zGm.SetGlobalBuffer((__gm__ float*)z, 64);
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 3 * 64);
    LocalTensor<float> t = q.AllocTensor<float>();
    DataCopyPad(t, xGm, DataCopyExtParams(3, 40, 8, 0, 0), DataCopyPadExtParams<float>(true, 0, 2, 0.0f));
    q.EnQue(t);
    t = q.DeQue<float>();
    DataCopyPad(zGm, t, DataCopyExtParams(3, 40, 0, 0, 0));
    q.FreeTensor(t);
}

static int RunCounters(const std::string& mode, int argc, char** argv) {
    uint8_t* x = nullptr;
    uint8_t* z = nullptr;
    uint8_t* tiling = nullptr;
    if (mode == "count_copy" && argc == 5) {
        CounterTiling t{static_cast<uint32_t>(std::atoi(argv[2])), static_cast<uint32_t>(std::atoi(argv[3]))};
        const int64_t blockDim = std::atoll(argv[4]);
        x = (uint8_t*)AscendC::GmAlloc(t.inBytes * blockDim);
        z = (uint8_t*)AscendC::GmAlloc(t.outBytes * blockDim);
        tiling = (uint8_t*)AscendC::GmAlloc(sizeof t);
        std::memcpy(tiling, &t, sizeof t);
        ICPU_RUN_KF(copy_kernel, blockDim, x, z, tiling);
        AscendC::GmFree(tiling);
    } else if (mode == "count_scalar" || mode == "count_pad") {
        x = (uint8_t*)AscendC::GmAlloc(256);
        z = (uint8_t*)AscendC::GmAlloc(256);
        if (mode == "count_scalar") ICPU_RUN_KF(scalar_kernel, 2, x, z);
        else ICPU_RUN_KF(pad_kernel, 1, x, z);
    } else {
        std::fprintf(stderr, "usage: %s count_copy <in_bytes> <out_bytes> <block_dim> | count_scalar | count_pad\n",
                     argv[0]);
        return 2;
    }
    std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    AscendC::GmFree(x);
    AscendC::GmFree(z);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]).rfind("count_", 0) == 0) {
        try {
            return RunCounters(argv[1], argc, argv);
        } catch (const AscendC::emu::DeviceRuleError& e) {
            std::printf("DEVICE_RULE_ERROR %s\n", e.what());
            return 3;
        }
    }
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <case> [block_dim]\n", argv[0]);
        return 2;
    }
    g_case = argv[1];
    if (Cases().count(g_case) == 0 && g_case != "unknown_soc" && g_case != "max_live_910a") {
        std::fprintf(stderr, "unknown case %s\n", g_case.c_str());
        return 2;
    }
    const int64_t blockDim = argc > 2 ? std::atoll(argv[2]) : 1;
    struct GmBuffer {  // freed on every return path
        uint8_t* p = (uint8_t*)AscendC::GmAlloc(256 * sizeof(float));
        ~GmBuffer() { AscendC::GmFree(p); }
    } xBuf, zBuf;
    uint8_t* x = xBuf.p;
    uint8_t* z = zBuf.p;
    for (int i = 0; i < 256; ++i) reinterpret_cast<float*>(x)[i] = static_cast<float>(i);
    try {
        if (g_case == "unknown_soc") AscendC::emu::SetSoc("Ascend999");
        if (g_case == "max_live_910a") {
            AscendC::emu::SetSoc("Ascend910A");
            g_case = "max_live";
        }
        AscendC::SetKernelMode(KernelMode::AIV_MODE);
        ICPU_RUN_KF(rules_kernel, blockDim, x, z);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    } catch (const std::invalid_argument& e) {
        std::printf("INVALID_ARGUMENT %s\n", e.what());
        return 4;
    }
    std::printf("Z");
    for (int i = 0; i < 16; ++i) std::printf(" %g", reinterpret_cast<float*>(z)[i]);
    std::printf("\nSTATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    return 0;
}
