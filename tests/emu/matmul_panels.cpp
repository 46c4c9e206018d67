// Asynchronous IterateAll panels for the emulator (test_emulator_panels.py runs it), the way the
// matmul-rows tall kernel uses them: each block cuts its rows of C = A x B into panels of
// `panelRows`, posts panel p + 1 with IterateAll<false>(slot, 0, false, true) into the other of
// two workspace slots before waiting for panel p (WaitIterateAll), then streams panel p through
// the UB to C. `mode` breaks one rule of the protocol (the emulator must report it):
//   ok           the protocol as above;
//   read_early   panel 0 is read before its WaitIterateAll;
//   wait_none    WaitIterateAll before any IterateAll<false>;
//   no_event     panels posted with waitIterateAll = false, then waited;
//   end_unwaited the last panel is neither waited nor read before End();
//   same_slot    panel p + 1 is posted into panel p's slot before p is waited;
//   after_sync   a synchronous IterateAll, then WaitIterateAll.
//
// usage: matmul_panels <mode> <M> <N> <K> <panelRows> <blocks> <dir>
//   reads <dir>/a.bin (M x K half), b.bin (K x N half); writes <dir>/c.bin (M x N float);
//   prints "STATS <json>"; exit 3 and "DEVICE_RULE_ERROR <msg>" on a broken rule.
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "lib/matmul_intf.h"
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace matmul;

static std::string g_mode;
static int g_m, g_n, g_k, g_panel, g_blocks;

using HalfIn = MatmulType<AscendC::TPosition::GM, CubeFormat::ND, half>;
using FloatGm = MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;

class PanelKernel {
 public:
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR ws) {
        t.usedCoreNum = g_blocks;
        t.M = g_m;
        t.N = t.singleCoreN = g_n;
        t.Ka = t.Kb = t.singleCoreK = g_k;
        t.singleCoreM = g_panel;
        t.baseM = 32;
        t.baseN = (g_n + 15) / 16 * 16 > 128 ? 128 : (g_n + 15) / 16 * 16;
        t.baseK = 32;
        t.depthA1 = t.depthB1 = 1;
        t.stepM = t.stepN = t.stepKa = t.stepKb = 1;
        t.dbL0A = t.dbL0B = 2;
        t.dbL0C = 1;
        REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
        aGm.SetGlobalBuffer((__gm__ half*)a, uint64_t(g_m) * g_k);
        bGm.SetGlobalBuffer((__gm__ half*)b, uint64_t(g_k) * g_n);
        cGm.SetGlobalBuffer((__gm__ float*)c, uint64_t(g_m) * g_n);
        slotElems = uint64_t(g_panel) * g_n;
        // this block's two slots
        wsGm.SetGlobalBuffer((__gm__ float*)ws + AscendC::GetBlockIdx() * 2 * slotElems, 2 * slotElems);
        pipe.InitBuffer(que, 2, 32 * g_n * sizeof(float));
    }
    __aicore__ inline void Process() {
        const int perCore = (g_m + g_blocks - 1) / g_blocks;
        const int first = int(AscendC::GetBlockIdx()) * perCore;
        const int last = first + perCore < g_m ? first + perCore : g_m;
        if (first >= last) return;
        const int panels = (last - first + g_panel - 1) / g_panel;
        if (g_mode == "wait_none") mm.WaitIterateAll();
        if (g_mode == "after_sync") {
            Post(first, last, 0, true);
            mm.WaitIterateAll();
            return;
        }
        Post(first, last, 0);
        for (int p = 0; p < panels; ++p) {
            if (p + 1 < panels) Post(first, last, p + 1);
            if (g_mode == "end_unwaited" && p + 1 == panels) break;  // neither waited nor read
            if (!(g_mode == "read_early" && p == 0)) mm.WaitIterateAll();
            const int row0 = first + p * g_panel;
            const int rows = last - row0 < g_panel ? last - row0 : g_panel;
            for (int r = 0; r < rows; r += 32) Chunk(p, row0, r, rows - r < 32 ? rows - r : 32);
            if (g_mode == "read_early") mm.WaitIterateAll();
        }
        mm.End();
    }

 private:
    __aicore__ inline AscendC::GlobalTensor<float> Slot(int p) {
        return wsGm[(g_mode == "same_slot" ? 0 : uint64_t(p % 2)) * slotElems];
    }
    __aicore__ inline void Post(int first, int last, int p, bool sync = false) {
        const int row0 = first + p * g_panel;
        const int rows = last - row0 < g_panel ? last - row0 : g_panel;
        mm.SetTail(rows, g_n, g_k);
        mm.SetTensorA(aGm[uint64_t(row0) * g_k]);
        mm.SetTensorB(bGm);
        if (sync) {
            mm.IterateAll(Slot(p));
        } else {
            mm.template IterateAll<false>(Slot(p), 0, false, g_mode != "no_event");
        }
    }
    // rows [r, r + n) of panel p (at C row row0) through the UB
    __aicore__ inline void Chunk(int p, int row0, int r, int n) {
        AscendC::LocalTensor<float> ub = que.AllocTensor<float>();
        AscendC::DataCopy(ub, Slot(p)[uint64_t(r) * g_n], uint32_t(n * g_n));
        que.EnQue(ub);
        ub = que.DeQue<float>();
        AscendC::DataCopy(cGm[uint64_t(row0 + r) * g_n], ub, uint32_t(n * g_n));
        que.FreeTensor(ub);
    }

    AscendC::TPipe pipe;
    TCubeTiling t{};
    Matmul<HalfIn, HalfIn, FloatGm> mm;
    AscendC::GlobalTensor<half> aGm, bGm;
    AscendC::GlobalTensor<float> cGm, wsGm;
    AscendC::TQue<AscendC::QuePosition::VECIN, 2> que;
    uint64_t slotElems = 0;
};

extern "C" __global__ __aicore__ void matmul_panels(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR ws) {
    PanelKernel k;
    k.Init(a, b, c, ws);
    k.Process();
}


int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: %s <mode> M N K panelRows blocks dir\n", argv[0]);
        return 2;
    }
    g_mode = argv[1];
    g_m = std::atoi(argv[2]);
    g_n = std::atoi(argv[3]);
    g_k = std::atoi(argv[4]);
    g_panel = std::atoi(argv[5]);
    g_blocks = std::atoi(argv[6]);
    const std::string dir = argv[7];
    const size_t aBytes = size_t(g_m) * g_k * sizeof(half), bBytes = size_t(g_k) * g_n * sizeof(half);
    const size_t cBytes = size_t(g_m) * g_n * sizeof(float);
    uint8_t* a = (uint8_t*)AscendC::GmAlloc(aBytes);
    uint8_t* b = (uint8_t*)AscendC::GmAlloc(bBytes);
    uint8_t* c = (uint8_t*)AscendC::GmAlloc(cBytes);
    uint8_t* ws = (uint8_t*)AscendC::GmAlloc(size_t(g_blocks) * 2 * g_panel * g_n * sizeof(float));
    if (!ReadFile(dir + "/a.bin", a, aBytes) || !ReadFile(dir + "/b.bin", b, bBytes)) return 2;
    AscendC::SetKernelMode(KernelMode::MIX_AIC_1_1);
    try {
        ICPU_RUN_KF(matmul_panels, g_blocks, a, b, c, ws);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    if (FILE* f = std::fopen((dir + "/c.bin").c_str(), "wb")) {
        std::fwrite(c, 1, cBytes, f);
        std::fclose(f);
    }
    AscendC::GmFree(a);
    AscendC::GmFree(b);
    AscendC::GmFree(c);
    AscendC::GmFree(ws);
    return 0;
}
