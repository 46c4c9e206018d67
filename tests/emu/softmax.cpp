// Row softmax sample (float): y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
// Rows are split over blocks; each tile of rows is moved with one multi-burst DataCopyPad
// (rows land 32-byte aligned in UB, padded to cpad columns).
//   mode "reduce": per row ReduceMax / Adds / Exp / ReduceSum / Muls with scalar reads (V_S sync)
//   mode "whole" : per tile WholeReduceMax + Brcb + mask-form Sub with a 0 block stride, Exp,
//                  WholeReduceSum + Brcb + mask-form Div (needs cols <= 64)
//
// usage: softmax <reduce|whole> <rows> <cols> <block_dim> <rows_per_tile> <dir>
//   reads <dir>/x.bin, writes <dir>/y.bin; prints "STATS <json>".
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace AscendC;

struct SoftmaxTiling {
    uint32_t rows;
    uint32_t cols;
    uint32_t rowsPerTile;
    uint32_t whole;  // 1: WholeReduce path
};

constexpr int32_t BUFFER_NUM = 2;

class KernelSoftmax {
 public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const SoftmaxTiling& t) {
        cols = t.cols;
        cpad = (cols + 7) / 8 * 8;
        tileRows = t.rowsPerTile;
        whole = t.whole != 0;
        const uint32_t blocks = static_cast<uint32_t>(GetBlockNum());
        const uint32_t per = (t.rows + blocks - 1) / blocks;
        const uint32_t first = per * static_cast<uint32_t>(GetBlockIdx());
        myRows = first >= t.rows ? 0 : (t.rows - first < per ? t.rows - first : per);
        xGm.SetGlobalBuffer((__gm__ float*)x + first * cols, myRows * cols);
        yGm.SetGlobalBuffer((__gm__ float*)y + first * cols, myRows * cols);
        pipe.InitBuffer(inQueue, BUFFER_NUM, tileRows * cpad * sizeof(float));
        pipe.InitBuffer(outQueue, BUFFER_NUM, tileRows * cpad * sizeof(float));
        pipe.InitBuffer(workBuf, cpad * sizeof(float));
        pipe.InitBuffer(rowBuf, (tileRows + 7) / 8 * 8 * sizeof(float));
        pipe.InitBuffer(bcastBuf, (tileRows + 7) / 8 * 8 * 32);
    }
    __aicore__ inline void Process() {
        for (uint32_t r = 0; r < myRows; r += tileRows) {
            const uint32_t n = myRows - r < tileRows ? myRows - r : tileRows;
            CopyIn(r, n);
            if (whole) ComputeWhole(n); else ComputeReduce(n);
            CopyOut(r, n);
        }
    }

 private:
    __aicore__ inline void CopyIn(uint32_t r, uint32_t n) {
        LocalTensor<float> x = inQueue.AllocTensor<float>();
        DataCopyExtParams p{static_cast<uint16_t>(n), static_cast<uint32_t>(cols * sizeof(float)), 0, 0, 0};
        DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
        DataCopyPad(x, xGm[r * cols], p, pad);
        inQueue.EnQue(x);
    }
    __aicore__ inline void ComputeReduce(uint32_t n) {
        LocalTensor<float> x = inQueue.DeQue<float>();
        LocalTensor<float> y = outQueue.AllocTensor<float>();
        LocalTensor<float> work = workBuf.Get<float>();
        LocalTensor<float> red = rowBuf.Get<float>();
        for (uint32_t i = 0; i < n; ++i) {
            LocalTensor<float> xr = x[i * cpad], yr = y[i * cpad];
            ReduceMax(red, xr, work, static_cast<int32_t>(cols));
            SetFlag<HardEvent::V_S>(0);
            WaitFlag<HardEvent::V_S>(0);
            const float mx = red.GetValue(0);
            Adds(yr, xr, -mx, static_cast<int32_t>(cols));
            Exp(yr, yr, static_cast<int32_t>(cols));
            ReduceSum(red, yr, work, static_cast<int32_t>(cols));
            SetFlag<HardEvent::V_S>(0);
            WaitFlag<HardEvent::V_S>(0);
            const float sum = red.GetValue(0);
            Muls(yr, yr, 1.0f / sum, static_cast<int32_t>(cols));
        }
        outQueue.EnQue(y);
        inQueue.FreeTensor(x);
    }
    __aicore__ inline void ComputeWhole(uint32_t n) {
        LocalTensor<float> x = inQueue.DeQue<float>();
        LocalTensor<float> y = outQueue.AllocTensor<float>();
        LocalTensor<float> red = rowBuf.Get<float>();
        LocalTensor<float> bc = bcastBuf.Get<float>();
        const uint8_t rowBlocks = static_cast<uint8_t>(cpad / 8);
        const uint8_t brcbRepeats = static_cast<uint8_t>((n + 7) / 8);
        // src1 block stride 0 / repeat stride 1: every block of row i reads the broadcast block i
        const BinaryRepeatParams rowWise(1, 1, 0, rowBlocks, rowBlocks, 1);
        WholeReduceMax(red, x, static_cast<int32_t>(cols), static_cast<int32_t>(n), 1, 1, rowBlocks,
                       ReduceOrder::ORDER_ONLY_VALUE);
        Brcb(bc, red, brcbRepeats, BrcbRepeatParams(1, 8));
        Sub(y, x, bc, static_cast<uint64_t>(cols), static_cast<uint8_t>(n), rowWise);
        Exp(y, y, static_cast<int32_t>(n * cpad));
        WholeReduceSum(red, y, static_cast<int32_t>(cols), static_cast<int32_t>(n), 1, 1, rowBlocks);
        Brcb(bc, red, brcbRepeats, BrcbRepeatParams(1, 8));
        Div(y, y, bc, static_cast<uint64_t>(cols), static_cast<uint8_t>(n), rowWise);
        outQueue.EnQue(y);
        inQueue.FreeTensor(x);
    }
    __aicore__ inline void CopyOut(uint32_t r, uint32_t n) {
        LocalTensor<float> y = outQueue.DeQue<float>();
        DataCopyExtParams p{static_cast<uint16_t>(n), static_cast<uint32_t>(cols * sizeof(float)), 0, 0, 0};
        DataCopyPad(yGm[r * cols], y, p);
        outQueue.FreeTensor(y);
    }

    TPipe pipe;
    TQue<QuePosition::VECIN, 1> inQueue;
    TQue<QuePosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> workBuf, rowBuf, bcastBuf;
    GlobalTensor<float> xGm, yGm;
    uint32_t cols = 0, cpad = 0, tileRows = 0, myRows = 0;
    bool whole = false;
};

extern "C" __global__ __aicore__ void softmax_custom(GM_ADDR x, GM_ADDR y, GM_ADDR tiling) {
    SoftmaxTiling t = *reinterpret_cast<__gm__ SoftmaxTiling*>(tiling);
    KernelSoftmax op;
    op.Init(x, y, t);
    op.Process();
}

// ------------------------------------------------------------------ host

int main(int argc, char** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s <reduce|whole> <rows> <cols> <block_dim> <rows_per_tile> <dir>\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1], dir = argv[6];
    SoftmaxTiling t{static_cast<uint32_t>(std::atoi(argv[2])), static_cast<uint32_t>(std::atoi(argv[3])),
                    static_cast<uint32_t>(std::atoi(argv[5])), mode == "whole" ? 1u : 0u};
    const int64_t blockDim = std::atoll(argv[4]);
    const size_t bytes = size_t(t.rows) * t.cols * sizeof(float);
    uint8_t* x = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* y = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* tiling = (uint8_t*)AscendC::GmAlloc(sizeof t);
    std::memcpy(tiling, &t, sizeof t);
    if (!ReadFile(dir + "/x.bin", x, bytes)) return 2;
    AscendC::SetKernelMode(KernelMode::AIV_MODE);
    try {
        ICPU_RUN_KF(softmax_custom, blockDim, x, y, tiling);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    WriteFile(dir + "/y.bin", y, bytes);
    AscendC::GmFree(x);
    AscendC::GmFree(y);
    AscendC::GmFree(tiling);
    return 0;
}
