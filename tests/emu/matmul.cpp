// Cube samples for the emulator, written the way CANN's Matmul samples are written:
//  - matmul_relu_*: C = ReLU(A x B + bias) with the high-level Matmul API; each tile comes into UB
//    through Iterate / GetTensorC, ReLU runs on the vector unit, DataCopyPad writes it out
//    (the MatmulLeakyRelu sample's structure, with ND_ALIGN tiles so any N works);
//  - matmul_relu_async_*: the same with an asynchronous round (SetWorkspace, one Iterate<false>,
//    GetTensorC<false> per tile, two output buffers), each block's slots in its part of the
//    user workspace;
//  - matmul_plain_*: C = A x B (+ bias) straight to GM with IterateAll, or Iterate + GetTensorC(gm);
//  - mmad_basic: the basic API (DataCopy ND->NZ, LoadData, Mmad, Fixpipe) on one core;
//  - rule cases: tilings and calls that break a device rule (test_emulator_cube.py checks them).
// Blocks split C into singleCoreM x singleCoreN tiles (block % mBlocks along M), the last ones
// taking the tails through SetTail, as CalcOffset does in the samples.
//
// usage: matmul <kernel> <dtype> <M> <N> <K> <baseM> <baseN> <baseK> <singleM> <singleN> <transA>
//               <transB> <bias> <order> <dir>       kernel: relu | relu_async | all | gm | mdl; dtype: f16 f16h f32 bf16
//        matmul mmad <M> <N> <K> <dir>
//        matmul rule <case>
//   reads <dir>/a.bin, b.bin, bias.bin; writes <dir>/c.bin; prints "STATS <json>";
//   exit 3 and "DEVICE_RULE_ERROR <msg>" on a broken rule.
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "lib/matmul_intf.h"
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

using namespace matmul;

struct MatmulArgs {  // what the samples pass next to the TCubeTiling
    uint32_t transA;
    uint32_t transB;
    uint32_t bias;
    uint32_t mode;  // 0: IterateAll, 1: Iterate + GetTensorC(gm)
};

__aicore__ inline uint32_t Ceiling(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

__aicore__ inline void CopyTiling(TCubeTiling* tiling, MatmulArgs* args, GM_ADDR tilingGM) {
    uint32_t* ptr = reinterpret_cast<uint32_t*>(tiling);
    auto tiling32 = reinterpret_cast<__gm__ uint32_t*>(tilingGM);
    for (uint32_t i = 0; i < sizeof(TCubeTiling) / sizeof(uint32_t); i++, ptr++) *ptr = *(tiling32 + i);
    std::memcpy(args, tilingGM + sizeof(TCubeTiling), sizeof(MatmulArgs));
}

// Offsets of this block's singleCore tile (CalcOffset of the samples) and its tail sizes.
struct CoreTile {
    int32_t offsetA, offsetB, offsetC, offsetBias, tailM, tailN;
};
__aicore__ inline CoreTile CalcOffset(int32_t blockIdx, const TCubeTiling& t, bool transA, bool transB) {
    CoreTile c;
    const int32_t mSingleBlocks = static_cast<int32_t>(Ceiling(t.M, t.singleCoreM));
    const int32_t mCoreIndx = blockIdx % mSingleBlocks, nCoreIndx = blockIdx / mSingleBlocks;
    c.offsetA = transA ? mCoreIndx * t.singleCoreM : mCoreIndx * t.Ka * t.singleCoreM;
    c.offsetB = transB ? nCoreIndx * t.Kb * t.singleCoreN : nCoreIndx * t.singleCoreN;
    c.offsetC = mCoreIndx * t.N * t.singleCoreM + nCoreIndx * t.singleCoreN;
    c.offsetBias = nCoreIndx * t.singleCoreN;
    c.tailM = t.M - mCoreIndx * t.singleCoreM < t.singleCoreM ? t.M - mCoreIndx * t.singleCoreM : t.singleCoreM;
    c.tailN = t.N - nCoreIndx * t.singleCoreN < t.singleCoreN ? t.N - nCoreIndx * t.singleCoreN : t.singleCoreN;
    return c;
}

// ------------------------------------------------------------------ matmul + bias + ReLU epilogue
template <typename aType, typename cType, typename biasType, bool ASYNC = false>
class MatmulBiasReluKernel {
 public:
    __aicore__ inline MatmulBiasReluKernel() {}
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR userWs,
                                const TCubeTiling& tiling, const MatmulArgs& args, AscendC::TPipe* pipe) {
        this->tiling = tiling;
        this->args = args;
        aGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ aType*>(a), tiling.M * tiling.Ka);
        bGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ aType*>(b), tiling.Kb * tiling.N);
        cGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ cType*>(c), tiling.M * tiling.N);
        biasGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ biasType*>(bias), tiling.N);
        core = CalcOffset(AscendC::GetBlockIdx(), tiling, args.transA, args.transB);
        aGlobal = aGlobal[core.offsetA];
        bGlobal = bGlobal[core.offsetB];
        cGlobal = cGlobal[core.offsetC];
        biasGlobal = biasGlobal[core.offsetBias];
        pipe->InitBuffer(reluOutQueue_, ASYNC ? 2 : 1, tiling.baseM * tiling.baseN * sizeof(cType));
        if constexpr (ASYNC) {  // one slot per tile of this block's round
            const uint32_t slots = Ceiling(tiling.singleCoreM, tiling.baseM) * Ceiling(tiling.singleCoreN, tiling.baseN);
            const uint32_t elems = slots * tiling.baseM * tiling.baseN;
            wsGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ cType*>(userWs) + AscendC::GetBlockIdx() * elems, elems);
        }
    }
    __aicore__ inline void Process() {
        matmulObj.SetTail(core.tailM, core.tailN);
        matmulObj.SetTensorA(aGlobal, args.transA);
        matmulObj.SetTensorB(bGlobal, args.transB);
        if (args.bias) {
            matmulObj.SetBias(biasGlobal);
        } else {
            matmulObj.DisableBias();
        }
        if constexpr (ASYNC) {
            matmulObj.SetWorkspace(wsGlobal);
            matmulObj.template Iterate<false>();  // the AIC computes the whole round ahead
            const uint32_t tiles = Ceiling(core.tailM, tiling.baseM) * Ceiling(core.tailN, tiling.baseN);
            for (uint32_t i = 0; i < tiles; ++i) {
                MatmulCompute(i);
                ReluCompute();
                CopyOut();
            }
        } else {
            uint32_t computeRound = 0;
            while (matmulObj.template Iterate<true>()) {
                MatmulCompute(computeRound);
                ReluCompute();
                CopyOut();
                computeRound++;
            }
        }
        matmulObj.End();
    }

    Matmul<MatmulType<AscendC::TPosition::GM, CubeFormat::ND, aType, true>,
           MatmulType<AscendC::TPosition::GM, CubeFormat::ND, aType, true>,
           MatmulType<AscendC::TPosition::VECIN, CubeFormat::ND_ALIGN, cType>,
           MatmulType<AscendC::TPosition::GM, CubeFormat::ND, biasType>>
        matmulObj;

 private:
    // Where tile `count` sits in this block's tile (iterateOrder 0: M fastest), and its size.
    __aicore__ inline void TileOf(uint32_t count) {
        const uint32_t roundM = Ceiling(core.tailM, tiling.baseM), roundN = Ceiling(core.tailN, tiling.baseN);
        mIdx_ = tiling.iterateOrder == 1 ? count / roundN : count % roundM;
        nIdx_ = tiling.iterateOrder == 1 ? count % roundN : count / roundM;
        const uint32_t restM = core.tailM - mIdx_ * tiling.baseM, restN = core.tailN - nIdx_ * tiling.baseN;
        curM_ = restM < static_cast<uint32_t>(tiling.baseM) ? restM : tiling.baseM;
        curN_ = restN < static_cast<uint32_t>(tiling.baseN) ? restN : tiling.baseN;
    }
    __aicore__ inline void MatmulCompute(uint32_t count) {
        TileOf(count);
        reluOutLocal = reluOutQueue_.AllocTensor<cType>();
        // ND_ALIGN + doPad: rows padded to 32 bytes in UB, so DataCopyPad can write any N.
        matmulObj.template GetTensorC<!ASYNC, true>(reluOutLocal, 0, true, curM_, curN_);
    }
    __aicore__ inline void ReluCompute() {
        const uint32_t alignN = Ceiling(curN_, 32 / sizeof(cType)) * (32 / sizeof(cType));
        AscendC::Relu(reluOutLocal, reluOutLocal, static_cast<int32_t>(curM_ * alignN));
        reluOutQueue_.EnQue(reluOutLocal);
    }
    __aicore__ inline void CopyOut() {
        reluOutLocal = reluOutQueue_.DeQue<cType>();
        AscendC::DataCopyExtParams copyParams{static_cast<uint16_t>(curM_), static_cast<uint32_t>(curN_ * sizeof(cType)),
                                              0, static_cast<uint32_t>((tiling.N - curN_) * sizeof(cType)), 0};
        AscendC::DataCopyPad(cGlobal[mIdx_ * tiling.baseM * tiling.N + nIdx_ * tiling.baseN], reluOutLocal, copyParams);
        reluOutQueue_.FreeTensor(reluOutLocal);
    }

    AscendC::GlobalTensor<aType> aGlobal, bGlobal;
    AscendC::GlobalTensor<cType> cGlobal, wsGlobal;
    AscendC::GlobalTensor<biasType> biasGlobal;
    AscendC::LocalTensor<cType> reluOutLocal;
    AscendC::TQue<AscendC::QuePosition::VECOUT, 1> reluOutQueue_;
    TCubeTiling tiling;
    MatmulArgs args;
    CoreTile core;
    uint32_t mIdx_ = 0, nIdx_ = 0, curM_ = 0, curN_ = 0;
};

template <typename aType, typename cType, typename biasType, bool ASYNC = false>
__aicore__ inline void RunRelu(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR workspace, GM_ADDR tilingGm) {
    AscendC::SetSysWorkspace(workspace);
    TCubeTiling tiling;
    MatmulArgs args;
    CopyTiling(&tiling, &args, tilingGm);
    if (AscendC::GetBlockIdx() >= tiling.usedCoreNum) return;
    MatmulBiasReluKernel<aType, cType, biasType, ASYNC> op;
    AscendC::TPipe pipe;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), op.matmulObj, &tiling);
    op.Init(a, b, bias, c, AscendC::GetUserWorkspace(workspace), tiling, args, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void matmul_relu_f16(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<half, float, float>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_f16h(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<half, half, half>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_f32(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<float, float, float>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_bf16(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<bfloat16_t, float, float>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_async_f16(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<half, float, float, true>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_async_f16h(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<half, half, half, true>(a, b, bias, c, ws, t);
}
extern "C" __global__ __aicore__ void matmul_relu_async_f32(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR ws, GM_ADDR t) {
    RunRelu<float, float, float, true>(a, b, bias, c, ws, t);
}

// ------------------------------------------------------------------ straight to GM
template <typename aType, typename cType, typename biasType, const MatmulConfig& CFG = CFG_NORM>
__aicore__ inline void RunPlain(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR tilingGm) {
    TCubeTiling tiling;
    MatmulArgs args;
    CopyTiling(&tiling, &args, tilingGm);
    if (AscendC::GetBlockIdx() >= tiling.usedCoreNum) return;
    const CoreTile core = CalcOffset(AscendC::GetBlockIdx(), tiling, args.transA, args.transB);
    AscendC::GlobalTensor<aType> aGlobal, bGlobal;
    AscendC::GlobalTensor<cType> cGlobal;
    AscendC::GlobalTensor<biasType> biasGlobal;
    aGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ aType*>(a), tiling.M * tiling.Ka);
    bGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ aType*>(b), tiling.Kb * tiling.N);
    cGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ cType*>(c), tiling.M * tiling.N);
    biasGlobal.SetGlobalBuffer(reinterpret_cast<__gm__ biasType*>(bias), tiling.N);

    AscendC::TPipe pipe;
    Matmul<MatmulType<AscendC::TPosition::GM, CubeFormat::ND, aType, true>,
           MatmulType<AscendC::TPosition::GM, CubeFormat::ND, aType, true>,
           MatmulType<AscendC::TPosition::GM, CubeFormat::ND, cType>,
           MatmulType<AscendC::TPosition::GM, CubeFormat::ND, biasType>, CFG>
        mm;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm);  // the form without tiling: Init follows
    mm.Init(&tiling);
    mm.SetOrgShape(tiling.M, tiling.N, tiling.Ka);
    mm.SetSingleShape(core.tailM, core.tailN, tiling.singleCoreK);
    mm.SetTensorA(aGlobal[core.offsetA], args.transA);
    mm.SetTensorB(bGlobal[core.offsetB], args.transB);
    if (args.bias) mm.SetBias(biasGlobal[core.offsetBias]);
    if (args.mode == 0) {
        mm.IterateAll(cGlobal[core.offsetC]);
    } else {
        while (mm.Iterate()) mm.GetTensorC(cGlobal[core.offsetC]);
    }
    mm.End();
}

extern "C" __global__ __aicore__ void matmul_plain_f32(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR, GM_ADDR t) {
    RunPlain<float, float, float>(a, b, bias, c, t);
}
extern "C" __global__ __aicore__ void matmul_plain_f16(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR, GM_ADDR t) {
    RunPlain<half, float, float>(a, b, bias, c, t);
}
// CFG_MDL: L1 keeps operand blocks across the round's tiles (depthA1 / depthB1 from the command line)
extern "C" __global__ __aicore__ void matmul_mdl_f32(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR, GM_ADDR t) {
    RunPlain<float, float, float, CFG_MDL>(a, b, bias, c, t);
}
extern "C" __global__ __aicore__ void matmul_mdl_f16(GM_ADDR a, GM_ADDR b, GM_ADDR bias, GM_ADDR c, GM_ADDR, GM_ADDR t) {
    RunPlain<half, float, float, CFG_MDL>(a, b, bias, c, t);
}

// ------------------------------------------------------------------ basic API (one core)
class KernelMmad {
 public:
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, uint16_t m, uint16_t n, uint16_t k) {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        this->m = m;
        this->n = n;
        this->k = k;
        aGM.SetGlobalBuffer((__gm__ half*)a, m * k);
        bGM.SetGlobalBuffer((__gm__ half*)b, k * n);
        cGM.SetGlobalBuffer((__gm__ float*)c, m * n);
        const uint32_t m16 = Blocks(m) * 16, n16 = Blocks(n) * 16, k16 = Blocks(k) * 16;
        pipe.InitBuffer(inQueueA1, 1, m16 * k16 * sizeof(half));
        pipe.InitBuffer(inQueueA2, 1, m16 * k16 * sizeof(half));
        pipe.InitBuffer(inQueueB1, 1, k16 * n16 * sizeof(half));
        pipe.InitBuffer(inQueueB2, 1, k16 * n16 * sizeof(half));
        pipe.InitBuffer(outQueueCO1, 1, m16 * n16 * sizeof(float));
    }
    __aicore__ inline void Process() {
        CopyIn();
        SplitA();
        SplitB();
        Compute();
        CopyOut();
    }

 private:
    __aicore__ inline uint32_t Blocks(uint32_t len) { return (len + 15) / 16; }
    __aicore__ inline void CopyIn() {
        AscendC::LocalTensor<half> a1Local = inQueueA1.AllocTensor<half>();
        AscendC::LocalTensor<half> b1Local = inQueueB1.AllocTensor<half>();
        AscendC::Nd2NzParams pa(1, m, k, 0, k, static_cast<uint16_t>(Blocks(m) * 16), 1, 0);
        AscendC::DataCopy(a1Local, aGM, pa);
        AscendC::Nd2NzParams pb(1, k, n, 0, n, static_cast<uint16_t>(Blocks(k) * 16), 1, 0);
        AscendC::DataCopy(b1Local, bGM, pb);
        inQueueA1.EnQue(a1Local);
        inQueueB1.EnQue(b1Local);
    }
    __aicore__ inline void SplitA() {  // NZ -> zZ
        AscendC::LocalTensor<half> a1Local = inQueueA1.DeQue<half>();
        AscendC::LocalTensor<half> a2Local = inQueueA2.AllocTensor<half>();
        AscendC::LoadData2DParams p;
        p.repeatTimes = static_cast<uint8_t>(Blocks(k));
        p.srcStride = static_cast<uint16_t>(Blocks(m));
        p.ifTranspose = false;
        for (uint32_t i = 0; i < Blocks(m); ++i) AscendC::LoadData(a2Local[i * Blocks(k) * 256], a1Local[i * 256], p);
        inQueueA2.EnQue<half>(a2Local);
        inQueueA1.FreeTensor(a1Local);
    }
    __aicore__ inline void SplitB() {  // NZ -> zN
        AscendC::LocalTensor<half> b1Local = inQueueB1.DeQue<half>();
        AscendC::LocalTensor<half> b2Local = inQueueB2.AllocTensor<half>();
        AscendC::LoadData2DParams p;
        p.repeatTimes = static_cast<uint8_t>(Blocks(n));
        p.srcStride = static_cast<uint16_t>(Blocks(k));
        p.ifTranspose = true;
        for (uint32_t i = 0; i < Blocks(k); ++i) AscendC::LoadData(b2Local[i * Blocks(n) * 256], b1Local[i * 256], p);
        inQueueB1.FreeTensor(b1Local);
        inQueueB2.EnQue<half>(b2Local);
    }
    __aicore__ inline void Compute() {
        AscendC::LocalTensor<half> a2Local = inQueueA2.DeQue<half>();
        AscendC::LocalTensor<half> b2Local = inQueueB2.DeQue<half>();
        AscendC::LocalTensor<float> c1Local = outQueueCO1.AllocTensor<float>();
        AscendC::MmadParams p;
        p.m = m;
        p.n = n;
        p.k = k;
        AscendC::Mmad(c1Local, a2Local, b2Local, p);
        outQueueCO1.EnQue<float>(c1Local);
        inQueueA2.FreeTensor(a2Local);
        inQueueB2.FreeTensor(b2Local);
    }
    __aicore__ inline void CopyOut() {
        AscendC::LocalTensor<float> c1Local = outQueueCO1.DeQue<float>();
        AscendC::FixpipeParamsV220 p;
        p.nSize = n;
        p.mSize = m;
        p.srcStride = static_cast<uint16_t>(Blocks(m) * 16);
        p.dstStride = n;
        p.ndNum = 1;
        AscendC::Fixpipe(cGM, c1Local, p);
        outQueueCO1.FreeTensor(c1Local);
    }

    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::A1, 1> inQueueA1;
    AscendC::TQue<AscendC::TPosition::A2, 1> inQueueA2;
    AscendC::TQue<AscendC::TPosition::B1, 1> inQueueB1;
    AscendC::TQue<AscendC::TPosition::B2, 1> inQueueB2;
    AscendC::TQue<AscendC::TPosition::CO1, 1> outQueueCO1;
    AscendC::GlobalTensor<half> aGM, bGM;
    AscendC::GlobalTensor<float> cGM;
    uint16_t m = 0, n = 0, k = 0;
};

extern "C" __global__ __aicore__ void mmad_basic(GM_ADDR a, GM_ADDR b, GM_ADDR c, uint16_t m, uint16_t n, uint16_t k) {
    KernelMmad op;
    op.Init(a, b, c, m, n, k);
    op.Process();
}

// ------------------------------------------------------------------ device-rule cases
static std::string g_case;

static TCubeTiling RuleTiling(int baseM, int baseN, int baseK) {
    TCubeTiling t;
    t.usedCoreNum = 1;
    t.M = t.singleCoreM = 64;
    t.N = t.singleCoreN = 64;
    t.Ka = t.Kb = t.singleCoreK = 64;
    t.baseM = baseM;
    t.baseN = baseN;
    t.baseK = baseK;
    t.depthA1 = t.depthB1 = 1;
    t.stepM = t.stepN = t.stepKa = t.stepKb = 1;
    t.dbL0A = t.dbL0B = 2;
    t.dbL0C = 1;
    return t;
}

using HalfIn = MatmulType<AscendC::TPosition::GM, CubeFormat::ND, half>;
using FloatOut = MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;
using UbOut = MatmulType<AscendC::TPosition::VECIN, CubeFormat::ND, float>;

// An asynchronous round of 2 x 2 tiles of 32 x 32 (C = A x A, 64 x 64 x 64) with its workspace in
// `c`: `wsTiles` slots; `fetches` GetTensorC<false> calls, then what `then` does.
enum class AsyncThen { NOTHING, NEW_ROUND, END, POKE_SLOT1, GM_FETCH };
static void AsyncRound(GM_ADDR a, GM_ADDR c, int wsTiles, int fetches, AsyncThen then, bool setWorkspace = true) {
    AscendC::TPipe pipe;
    Matmul<HalfIn, HalfIn, UbOut> mm;
    TCubeTiling t = RuleTiling(32, 32, 32);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
    AscendC::TQue<AscendC::QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 32 * 32 * sizeof(float));
    AscendC::GlobalTensor<half> g;
    g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
    AscendC::GlobalTensor<float> ws;
    ws.SetGlobalBuffer((__gm__ float*)c, wsTiles * 32 * 32);
    if (setWorkspace) mm.SetWorkspace(ws);
    mm.SetTensorA(g);
    mm.SetTensorB(g);
    mm.template Iterate<false>();
    if (then == AsyncThen::POKE_SLOT1) ws.SetValue(32 * 32 + 5, 1.0f);  // a stray write into slot 1
    for (int i = 0; i < fetches; ++i) {
        AscendC::LocalTensor<float> ub = q.AllocTensor<float>();
        mm.template GetTensorC<false>(ub, 0, true);
        q.FreeTensor(ub);
    }
    if (then == AsyncThen::NEW_ROUND) {
        mm.SetTensorA(g);
        mm.template Iterate<false>();
    } else if (then == AsyncThen::GM_FETCH) {
        mm.GetTensorC(ws);
    }
    mm.End();
}

static const std::map<std::string, std::function<void(GM_ADDR, GM_ADDR, GM_ADDR)>>& RuleCases() {
    static const std::map<std::string, std::function<void(GM_ADDR, GM_ADDR, GM_ADDR)>> cases = {
        {"l0a_overflow", [](GM_ADDR, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(128, 64, 256);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
         }},
        {"l0c_overflow", [](GM_ADDR, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(256, 256, 16);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
         }},
        {"l1_overflow", [](GM_ADDR, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(256, 16, 128);
             t.depthA1 = 8;
             t.dbL0A = 1;
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
         }},
        {"two_objects", [](GM_ADDR, GM_ADDR, GM_ADDR) {  // each fits, together they do not
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm1, mm2;
             TCubeTiling t = RuleTiling(128, 128, 32);  // L0C: 128 x 128 x 4 = 65536 B each
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm1, &t, mm2, &t);
             TCubeTiling big = RuleTiling(128, 256, 16);
             Matmul<HalfIn, HalfIn, FloatOut> mm3;
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm3, &big);
         }},
        {"base_align", [](GM_ADDR, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(40, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
         }},
        {"aiv_mode", [](GM_ADDR, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
         }},
        {"trans_undeclared", [](GM_ADDR a, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::GlobalTensor<half> g;
             g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             mm.SetTensorB(g, true);
         }},
        {"get_before_iterate", [](GM_ADDR a, GM_ADDR, GM_ADDR c) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::GlobalTensor<half> g;
             g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             AscendC::GlobalTensor<float> gc;
             gc.SetGlobalBuffer((__gm__ float*)c, 64 * 64);
             mm.SetTensorA(g);
             mm.SetTensorB(g);
             mm.GetTensorC(gc);
         }},
        {"aic_ub", [](GM_ADDR a, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, UbOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::TQue<AscendC::QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64 * 64 * sizeof(float));
             AscendC::GlobalTensor<half> g;
             g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             mm.SetTensorA(g);
             mm.SetTensorB(g);
             mm.Iterate();
             AscendC::LocalTensor<float> ub = q.AllocTensor<float>();
             mm.GetTensorC(ub, 0, true);
         }},
        {"missing_tail", [](GM_ADDR a, GM_ADDR, GM_ADDR c) {  // second M block without SetTail
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             t.M = 100;
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::GlobalTensor<half> ga, gb;
             ga.SetGlobalBuffer((__gm__ half*)a, 100 * 64);
             gb.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             AscendC::GlobalTensor<float> gc;
             gc.SetGlobalBuffer((__gm__ float*)c, 100 * 64);
             mm.SetTensorA(ga[64 * 64]);
             mm.SetTensorB(gb);
             mm.IterateAll(gc[64 * 64]);
             mm.End();
         }},
        {"async_ok", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 4, 4, AsyncThen::NOTHING); }},
        {"async_no_workspace", [](GM_ADDR a, GM_ADDR, GM_ADDR c) {
             AsyncRound(a, c, 4, 4, AsyncThen::NOTHING, false);
         }},
        {"async_small_workspace", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 3, 3, AsyncThen::NOTHING); }},
        {"async_fetch_past_round", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 4, 5, AsyncThen::NOTHING); }},
        {"async_new_round_unfetched", [](GM_ADDR a, GM_ADDR, GM_ADDR c) {
             AsyncRound(a, c, 4, 2, AsyncThen::NEW_ROUND);
         }},
        {"async_end_unfetched", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 4, 3, AsyncThen::END); }},
        {"async_overwritten", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 4, 4, AsyncThen::POKE_SLOT1); }},
        {"async_gm_fetch", [](GM_ADDR a, GM_ADDR, GM_ADDR c) { AsyncRound(a, c, 4, 1, AsyncThen::GM_FETCH); }},
        {"async_fetch_after_sync", [](GM_ADDR a, GM_ADDR, GM_ADDR) {
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, UbOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::TQue<AscendC::QuePosition::VECIN, 1> q;
             pipe.InitBuffer(q, 1, 64 * 64 * sizeof(float));
             AscendC::GlobalTensor<half> g;
             g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             mm.SetTensorA(g);
             mm.SetTensorB(g);
             mm.Iterate();
             AscendC::LocalTensor<float> ub = q.AllocTensor<float>();
             mm.template GetTensorC<false>(ub, 0, true);
         }},
        {"no_end", [](GM_ADDR a, GM_ADDR, GM_ADDR c) {  // warning only
             AscendC::TPipe pipe;
             Matmul<HalfIn, HalfIn, FloatOut> mm;
             TCubeTiling t = RuleTiling(64, 64, 64);
             REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
             AscendC::GlobalTensor<half> g;
             g.SetGlobalBuffer((__gm__ half*)a, 64 * 64);
             AscendC::GlobalTensor<float> gc;
             gc.SetGlobalBuffer((__gm__ float*)c, 64 * 64);
             mm.SetTensorA(g);
             mm.SetTensorB(g);
             mm.IterateAll(gc);
         }},
    };
    return cases;
}

extern "C" __global__ __aicore__ void cube_rules(GM_ADDR a, GM_ADDR b, GM_ADDR c) { RuleCases().at(g_case)(a, b, c); }

// ------------------------------------------------------------------ host

static int RunRules(const std::string& which) {
    g_case = which;
    if (RuleCases().count(which) == 0) {
        std::fprintf(stderr, "unknown case %s\n", which.c_str());
        return 2;
    }
    uint8_t* a = (uint8_t*)AscendC::GmAlloc(100 * 64 * sizeof(half));
    uint8_t* c = (uint8_t*)AscendC::GmAlloc(100 * 64 * sizeof(float));
    AscendC::SetKernelMode(which == "aiv_mode" ? KernelMode::AIV_MODE
                           : which == "aic_ub" ? KernelMode::AIC_MODE
                                               : KernelMode::MIX_AIC_1_1);
    try {
        ICPU_RUN_KF(cube_rules, 1, a, a, c);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    AscendC::GmFree(a);
    AscendC::GmFree(c);
    return 0;
}

static int RunMmad(int argc, char** argv) {
    if (argc != 6) return 2;
    const uint16_t m = static_cast<uint16_t>(std::atoi(argv[2])), n = static_cast<uint16_t>(std::atoi(argv[3])),
                   k = static_cast<uint16_t>(std::atoi(argv[4]));
    const std::string dir = argv[5];
    uint8_t* a = (uint8_t*)AscendC::GmAlloc(m * k * sizeof(half));
    uint8_t* b = (uint8_t*)AscendC::GmAlloc(k * n * sizeof(half));
    uint8_t* c = (uint8_t*)AscendC::GmAlloc(m * n * sizeof(float));
    if (!ReadFile(dir + "/a.bin", a, m * k * sizeof(half)) || !ReadFile(dir + "/b.bin", b, k * n * sizeof(half))) return 2;
    AscendC::SetKernelMode(KernelMode::AIC_MODE);
    try {
        ICPU_RUN_KF(mmad_basic, 1, a, b, c, m, n, k);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    WriteFile(dir + "/c.bin", c, m * n * sizeof(float));
    AscendC::GmFree(a);
    AscendC::GmFree(b);
    AscendC::GmFree(c);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 3 && std::string(argv[1]) == "rule") return RunRules(argv[2]);
    if (argc >= 2 && std::string(argv[1]) == "mmad") return RunMmad(argc, argv);
    if (argc != 16 && argc != 18) {
        std::fprintf(stderr, "usage: %s <relu|all|gm|mdl> <f16|f16h|f32|bf16> M N K baseM baseN baseK singleM singleN "
                             "transA transB bias order dir [depthA1 depthB1]\n", argv[0]);
        return 2;
    }
    const std::string kernel = argv[1], dtype = argv[2], dir = argv[15];
    if (kernel != "relu" && kernel != "relu_async" && dtype != "f32" && dtype != "f16") {
        std::fprintf(stderr, "kernels all/gm take f32 or f16 only\n");
        return 2;
    }
    int v[12];
    for (int i = 0; i < 12; ++i) v[i] = std::atoi(argv[3 + i]);
    const int M = v[0], N = v[1], K = v[2];
    const size_t inBytes = dtype == "f32" ? 4 : 2, outBytes = dtype == "f16h" ? 2 : 4;
    TCubeTiling t;
    t.M = M;
    t.N = N;
    t.Ka = t.Kb = t.singleCoreK = K;
    t.baseM = v[3];
    t.baseN = v[4];
    t.baseK = v[5];
    t.singleCoreM = v[6];
    t.singleCoreN = v[7];
    t.usedCoreNum = static_cast<int32_t>(Ceiling(M, v[6]) * Ceiling(N, v[7]));
    t.depthA1 = argc == 18 ? std::atoi(argv[16]) : 2;
    t.depthB1 = argc == 18 ? std::atoi(argv[17]) : 2;
    t.stepM = t.stepN = t.stepKa = t.stepKb = 1;
    t.isBias = v[10];
    t.iterateOrder = v[11];
    t.dbL0A = t.dbL0B = 2;
    t.dbL0C = 1;
    MatmulArgs args{static_cast<uint32_t>(v[8]), static_cast<uint32_t>(v[9]), static_cast<uint32_t>(v[10]),
                    kernel == "gm" ? 1u : 0u};

    uint8_t* a = (uint8_t*)AscendC::GmAlloc(size_t(M) * K * inBytes);
    uint8_t* b = (uint8_t*)AscendC::GmAlloc(size_t(K) * N * inBytes);
    uint8_t* bias = (uint8_t*)AscendC::GmAlloc(size_t(N) * outBytes);
    uint8_t* c = (uint8_t*)AscendC::GmAlloc(size_t(M) * N * outBytes);
    // relu_async: each block's round caches its tiles in its own part of the user workspace
    const size_t wsSlots = kernel == "relu_async" ? size_t(Ceiling(v[6], v[3])) * Ceiling(v[7], v[4]) : 0;
    uint8_t* ws = (uint8_t*)AscendC::GmAlloc(AscendC::emu::kSysWorkspaceBytes +
                                             size_t(t.usedCoreNum) * wsSlots * v[3] * v[4] * outBytes);
    uint8_t* tiling = (uint8_t*)AscendC::GmAlloc(sizeof(TCubeTiling) + sizeof(MatmulArgs));
    std::memcpy(tiling, &t, sizeof t);
    std::memcpy(tiling + sizeof t, &args, sizeof args);
    if (!ReadFile(dir + "/a.bin", a, size_t(M) * K * inBytes) || !ReadFile(dir + "/b.bin", b, size_t(K) * N * inBytes) ||
        !ReadFile(dir + "/bias.bin", bias, size_t(N) * outBytes)) {
        std::fprintf(stderr, "cannot read inputs\n");
        return 2;
    }
    // EMU_MIX=1_2: CANN's default mix on 910B, one AIC per two AIVs, each AIV one block of the
    // tiling (usedCoreNum counts AIVs, as the Matmul samples launch (usedCoreNum + 1) / 2);
    // otherwise 1:1, one AIC + AIV pair per block
    const char* mix = std::getenv("EMU_MIX");
    const bool oneToTwo = mix != nullptr && std::string(mix) == "1_2";
    AscendC::SetKernelMode(oneToTwo ? KernelMode::MIX_MODE : KernelMode::MIX_AIC_1_1);
    const int64_t blockDim = oneToTwo ? (t.usedCoreNum + 1) / 2 : t.usedCoreNum;
    try {
        if (kernel == "relu") {
            if (dtype == "f16") ICPU_RUN_KF(matmul_relu_f16, blockDim, a, b, bias, c, ws, tiling);
            else if (dtype == "f16h") ICPU_RUN_KF(matmul_relu_f16h, blockDim, a, b, bias, c, ws, tiling);
            else if (dtype == "f32") ICPU_RUN_KF(matmul_relu_f32, blockDim, a, b, bias, c, ws, tiling);
            else ICPU_RUN_KF(matmul_relu_bf16, blockDim, a, b, bias, c, ws, tiling);
        } else if (kernel == "relu_async") {
            if (dtype == "f16") ICPU_RUN_KF(matmul_relu_async_f16, blockDim, a, b, bias, c, ws, tiling);
            else if (dtype == "f16h") ICPU_RUN_KF(matmul_relu_async_f16h, blockDim, a, b, bias, c, ws, tiling);
            else ICPU_RUN_KF(matmul_relu_async_f32, blockDim, a, b, bias, c, ws, tiling);
        } else if (kernel == "mdl") {
            if (dtype == "f32") ICPU_RUN_KF(matmul_mdl_f32, blockDim, a, b, bias, c, ws, tiling);
            else ICPU_RUN_KF(matmul_mdl_f16, blockDim, a, b, bias, c, ws, tiling);
        } else if (dtype == "f32") {
            ICPU_RUN_KF(matmul_plain_f32, blockDim, a, b, bias, c, ws, tiling);
        } else {
            ICPU_RUN_KF(matmul_plain_f16, blockDim, a, b, bias, c, ws, tiling);
        }
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    WriteFile(dir + "/c.bin", c, size_t(M) * N * outBytes);
    for (uint8_t* p : {a, b, bias, c, ws, tiling}) AscendC::GmFree(p);
    return 0;
}
