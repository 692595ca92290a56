// The one file that includes cublasLt.h. Every descriptor attribute that affects numerics or
// algorithm choice is set explicitly, also where the value equals cuBLASLt's default, so that
// a library update cannot silently change what we measure.
#include "gpu/gemm/cublaslt.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/gemm_ref.hpp"

namespace fp8sim::gpu {

namespace {

#define FP8SIM_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                     \
    const cublasStatus_t fp8sim_st_ = (call);                                                              \
    if (fp8sim_st_ != CUBLAS_STATUS_SUCCESS)                                                               \
      ::fp8sim::throw_check_failure(#call, __FILE__, __LINE__,                                             \
                                    fmt::format("cuBLASLt error: {}", cublasLtGetStatusName(fp8sim_st_))); \
  } while (0)

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(GemmCandidate::algo), "GemmCandidate::algo holds one algo");

cudaDataType_t cuda_type(Format f) {
  switch (f) {
    case Format::E4M3:
      return CUDA_R_8F_E4M3;
    case Format::E5M2:
      return CUDA_R_8F_E5M2;
    case Format::BF16:
      return CUDA_R_16BF;
    case Format::FP16:
      return CUDA_R_16F;
    case Format::FP32:
      return CUDA_R_32F;
    default:
      break;
  }
  throw Error(fmt::format("cuBLASLt GEMM: format {} is not a GEMM operand type", format_name(f)));
}

size_t elem_bytes(Format f) { return static_cast<size_t>(format_info(f).bits / 8); }

int32_t scale_mode(GemmScaling s) {
  switch (s) {
    case GemmScaling::None:
    case GemmScaling::Tensor:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case GemmScaling::Row:
      return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case GemmScaling::Block:
    case GemmScaling::Block1D:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;  // Block: A's is set below
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

// The largest power of two <= 256 dividing the address: the alignment cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  FP8SIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(T)));
}
template <class T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(T)));
}
template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  FP8SIM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(T)));
}

// ---- tiles ---------------------------------------------------------------------------------------
// cublasLtMatmulTile_t value v (1 ... 634) -> {rows, columns} of the output tile at kTileDims[v - 1]:
// the enumerators CUBLASLT_MATMUL_TILE_<rows>x<columns> of cublasLt.h, whose values are part of the
// library's ABI (later versions only append). Rows run along D's first dimension (cuBLAS's M).
constexpr uint16_t kTileDims[][2] = {
    {8, 8},     {8, 16},     {16, 8},    {8, 32},     {16, 16},   {32, 8},    {8, 64},    {16, 32},   {32, 16},
    {64, 8},    {32, 32},    {32, 64},   {64, 32},    {32, 128},  {64, 64},   {128, 32},  {64, 128},  {128, 64},
    {64, 256},  {128, 128},  {256, 64},  {64, 512},   {128, 256}, {256, 128}, {512, 64},  {64, 96},   {96, 64},
    {96, 128},  {128, 160},  {160, 128}, {192, 128},  {128, 192}, {128, 96},  {32, 256},  {256, 32},  {8, 128},
    {8, 192},   {8, 256},    {8, 320},   {8, 384},    {8, 448},   {8, 512},   {8, 576},   {8, 640},   {8, 704},
    {8, 768},   {16, 64},    {16, 128},  {16, 192},   {16, 256},  {16, 320},  {16, 384},  {16, 448},  {16, 512},
    {16, 576},  {16, 640},   {16, 704},  {16, 768},   {24, 64},   {24, 128},  {24, 192},  {24, 256},  {24, 320},
    {24, 384},  {24, 448},   {24, 512},  {24, 576},   {24, 640},  {24, 704},  {24, 768},  {32, 192},  {32, 320},
    {32, 384},  {32, 448},   {32, 512},  {32, 576},   {32, 640},  {32, 704},  {32, 768},  {40, 64},   {40, 128},
    {40, 192},  {40, 256},   {40, 320},  {40, 384},   {40, 448},  {40, 512},  {40, 576},  {40, 640},  {40, 704},
    {40, 768},  {48, 64},    {48, 128},  {48, 192},   {48, 256},  {48, 320},  {48, 384},  {48, 448},  {48, 512},
    {48, 576},  {48, 640},   {48, 704},  {48, 768},   {56, 64},   {56, 128},  {56, 192},  {56, 256},  {56, 320},
    {56, 384},  {56, 448},   {56, 512},  {56, 576},   {56, 640},  {56, 704},  {56, 768},  {64, 192},  {64, 320},
    {64, 384},  {64, 448},   {64, 576},  {64, 640},   {64, 704},  {64, 768},  {72, 64},   {72, 128},  {72, 192},
    {72, 256},  {72, 320},   {72, 384},  {72, 448},   {72, 512},  {72, 576},  {72, 640},  {80, 64},   {80, 128},
    {80, 192},  {80, 256},   {80, 320},  {80, 384},   {80, 448},  {80, 512},  {80, 576},  {88, 64},   {88, 128},
    {88, 192},  {88, 256},   {88, 320},  {88, 384},   {88, 448},  {88, 512},  {96, 192},  {96, 256},  {96, 320},
    {96, 384},  {96, 448},   {96, 512},  {104, 64},   {104, 128}, {104, 192}, {104, 256}, {104, 320}, {104, 384},
    {104, 448}, {112, 64},   {112, 128}, {112, 192},  {112, 256}, {112, 320}, {112, 384}, {120, 64},  {120, 128},
    {120, 192}, {120, 256},  {120, 320}, {120, 384},  {128, 320}, {128, 384}, {136, 64},  {136, 128}, {136, 192},
    {136, 256}, {136, 320},  {144, 64},  {144, 128},  {144, 192}, {144, 256}, {144, 320}, {152, 64},  {152, 128},
    {152, 192}, {152, 256},  {152, 320}, {160, 64},   {160, 192}, {160, 256}, {168, 64},  {168, 128}, {168, 192},
    {168, 256}, {176, 64},   {176, 128}, {176, 192},  {176, 256}, {184, 64},  {184, 128}, {184, 192}, {184, 256},
    {192, 64},  {192, 192},  {192, 256}, {200, 64},   {200, 128}, {200, 192}, {208, 64},  {208, 128}, {208, 192},
    {216, 64},  {216, 128},  {216, 192}, {224, 64},   {224, 128}, {224, 192}, {232, 64},  {232, 128}, {232, 192},
    {240, 64},  {240, 128},  {240, 192}, {248, 64},   {248, 128}, {248, 192}, {256, 192}, {264, 64},  {264, 128},
    {272, 64},  {272, 128},  {280, 64},  {280, 128},  {288, 64},  {288, 128}, {296, 64},  {296, 128}, {304, 64},
    {304, 128}, {312, 64},   {312, 128}, {320, 64},   {320, 128}, {328, 64},  {328, 128}, {336, 64},  {336, 128},
    {344, 64},  {344, 128},  {352, 64},  {352, 128},  {360, 64},  {360, 128}, {368, 64},  {368, 128}, {376, 64},
    {376, 128}, {384, 64},   {384, 128}, {392, 64},   {400, 64},  {408, 64},  {416, 64},  {424, 64},  {432, 64},
    {440, 64},  {448, 64},   {456, 64},  {464, 64},   {472, 64},  {480, 64},  {488, 64},  {496, 64},  {504, 64},
    {520, 64},  {528, 64},   {536, 64},  {544, 64},   {552, 64},  {560, 64},  {568, 64},  {576, 64},  {584, 64},
    {592, 64},  {600, 64},   {608, 64},  {616, 64},   {624, 64},  {632, 64},  {640, 64},  {648, 64},  {656, 64},
    {664, 64},  {672, 64},   {680, 64},  {688, 64},   {696, 64},  {704, 64},  {712, 64},  {720, 64},  {728, 64},
    {736, 64},  {744, 64},   {752, 64},  {760, 64},   {768, 64},  {64, 16},   {64, 24},   {64, 40},   {64, 48},
    {64, 56},   {64, 72},    {64, 80},   {64, 88},    {64, 104},  {64, 112},  {64, 120},  {64, 136},  {64, 144},
    {64, 152},  {64, 160},   {64, 168},  {64, 176},   {64, 184},  {64, 200},  {64, 208},  {64, 216},  {64, 224},
    {64, 232},  {64, 240},   {64, 248},  {64, 264},   {64, 272},  {64, 280},  {64, 288},  {64, 296},  {64, 304},
    {64, 312},  {64, 328},   {64, 336},  {64, 344},   {64, 352},  {64, 360},  {64, 368},  {64, 376},  {64, 392},
    {64, 400},  {64, 408},   {64, 416},  {64, 424},   {64, 432},  {64, 440},  {64, 456},  {64, 464},  {64, 472},
    {64, 480},  {64, 488},   {64, 496},  {64, 504},   {64, 520},  {64, 528},  {64, 536},  {64, 544},  {64, 552},
    {64, 560},  {64, 568},   {64, 584},  {64, 592},   {64, 600},  {64, 608},  {64, 616},  {64, 624},  {64, 632},
    {64, 648},  {64, 656},   {64, 664},  {64, 672},   {64, 680},  {64, 688},  {64, 696},  {64, 712},  {64, 720},
    {64, 728},  {64, 736},   {64, 744},  {64, 752},   {64, 760},  {128, 8},   {128, 16},  {128, 24},  {128, 40},
    {128, 48},  {128, 56},   {128, 72},  {128, 80},   {128, 88},  {128, 104}, {128, 112}, {128, 120}, {128, 136},
    {128, 144}, {128, 152},  {128, 168}, {128, 176},  {128, 184}, {128, 200}, {128, 208}, {128, 216}, {128, 224},
    {128, 232}, {128, 240},  {128, 248}, {128, 264},  {128, 272}, {128, 280}, {128, 288}, {128, 296}, {128, 304},
    {128, 312}, {128, 328},  {128, 336}, {128, 344},  {128, 352}, {128, 360}, {128, 368}, {128, 376}, {128, 392},
    {128, 400}, {128, 408},  {128, 416}, {128, 424},  {128, 432}, {128, 440}, {128, 448}, {128, 456}, {128, 464},
    {128, 472}, {128, 480},  {128, 488}, {128, 496},  {128, 504}, {128, 512}, {192, 8},   {192, 16},  {192, 24},
    {192, 32},  {192, 40},   {192, 48},  {192, 56},   {192, 72},  {192, 80},  {192, 88},  {192, 96},  {192, 104},
    {192, 112}, {192, 120},  {192, 136}, {192, 144},  {192, 152}, {192, 160}, {192, 168}, {192, 176}, {192, 184},
    {192, 200}, {192, 208},  {192, 216}, {192, 224},  {192, 232}, {192, 240}, {192, 248}, {192, 264}, {192, 272},
    {192, 280}, {192, 288},  {192, 296}, {192, 304},  {192, 312}, {192, 320}, {192, 328}, {192, 336}, {256, 8},
    {256, 16},  {256, 24},   {256, 40},  {256, 48},   {256, 56},  {256, 72},  {256, 80},  {256, 88},  {256, 96},
    {256, 104}, {256, 112},  {256, 120}, {256, 136},  {256, 144}, {256, 152}, {256, 160}, {256, 168}, {256, 176},
    {256, 184}, {256, 200},  {256, 208}, {256, 216},  {256, 224}, {256, 232}, {256, 240}, {256, 248}, {256, 256},
    {320, 8},   {320, 16},   {320, 24},  {320, 32},   {320, 40},  {320, 48},  {320, 56},  {320, 72},  {320, 80},
    {320, 88},  {320, 96},   {320, 104}, {320, 112},  {320, 120}, {320, 136}, {320, 144}, {320, 152}, {320, 160},
    {320, 168}, {320, 176},  {320, 184}, {320, 192},  {320, 200}, {384, 8},   {384, 16},  {384, 24},  {384, 32},
    {384, 40},  {384, 48},   {384, 56},  {384, 72},   {384, 80},  {384, 88},  {384, 96},  {384, 104}, {384, 112},
    {384, 120}, {384, 136},  {384, 144}, {384, 152},  {384, 160}, {384, 168}, {448, 8},   {448, 16},  {448, 24},
    {448, 32},  {448, 40},   {448, 48},  {448, 56},   {448, 72},  {448, 80},  {448, 88},  {448, 96},  {448, 104},
    {448, 112}, {448, 120},  {448, 128}, {448, 136},  {448, 144}, {512, 8},   {512, 16},  {512, 24},  {512, 32},
    {512, 40},  {512, 48},   {512, 56},  {512, 72},   {512, 80},  {512, 88},  {512, 96},  {512, 104}, {512, 112},
    {512, 120}, {512, 128},  {576, 8},   {576, 16},   {576, 24},  {576, 32},  {576, 40},  {576, 48},  {576, 56},
    {576, 72},  {576, 80},   {576, 88},  {576, 96},   {576, 104}, {576, 112}, {640, 8},   {640, 16},  {640, 24},
    {640, 32},  {640, 40},   {640, 48},  {640, 56},   {640, 72},  {640, 80},  {640, 88},  {640, 96},  {704, 8},
    {704, 16},  {704, 24},   {704, 32},  {704, 40},   {704, 48},  {704, 56},  {704, 72},  {704, 80},  {704, 88},
    {768, 8},   {768, 16},   {768, 24},  {768, 32},   {768, 40},  {768, 48},  {768, 56},  {768, 72},  {768, 80},
    {256, 512}, {256, 1024}, {512, 512}, {512, 1024},
};
constexpr int kTileCount = static_cast<int>(sizeof(kTileDims) / sizeof(kTileDims[0]));
static_assert(kTileCount == 634, "one entry per cublasLtMatmulTile_t value 1 ... 634");

// false for CUBLASLT_MATMUL_TILE_UNDEFINED and for values this table does not know.
bool tile_dims(int id, int& rows, int& cols) {
  if (id < 1 || id > kTileCount) return false;
  rows = kTileDims[id - 1][0];
  cols = kTileDims[id - 1][1];
  return true;
}

// ---- what the search leaves out --------------------------------------------------------------------
// Block scaling puts W (cuBLAS's A) in 128x128 blocks (BLK128x128_32F): one scale per 128 rows of D
// and 128 of K. The cuBLAS documentation ("cuBLAS Library", "128-element 1D and 128x128 2D Block
// Scaling For FP8 Data Types" and its "Scaling factors layouts") defines the scales that way and
// states no requirement on the tile; its cublasLtMatmulAlgoCheck() section notes that
// CUBLAS_STATUS_SUCCESS "doesn't fully guarantee" the algorithm runs. cuBLASLt 13.x on sm_90 accepts
// tiles whose row count is not a multiple of 128 for this mode, i.e. tiles that split one of A's
// scale blocks between CTAs, and for some of them returns wrong results (CUBLASLT_MATMUL_TILE_32x64
// with 2x1x1 and 1x2x1 clusters). This rule is therefore a limitation of the library as observed,
// not a documented constraint: the search leaves every such tile out, and plan()'s validation
// rejects a wrong configuration whatever its tile. Tiles of unknown size are kept (the validation
// still applies). Returns the reason, empty to keep.
std::string search_exclusion(const GemmConfig& cfg, uint32_t tile) {
  if (cfg.scaling == GemmScaling::Block) {
    int rows = 0, cols = 0;
    if (tile_dims(static_cast<int>(tile), rows, cols) && rows % 128 != 0)
      return fmt::format("block scaling: the {}x{} tile's {} rows split W's 128-row scale blocks", rows, cols, rows);
  }
  return {};
}

}  // namespace

struct CublasLt::Handle {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct GemmPlan::Impl {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool have_algo = false;
  // The scale pointers baked into desc (re-set by run() when the caller passes others).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  ~Impl() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// ---- descriptors -----------------------------------------------------------------------------------

struct Types {
  cudaDataType_t a, b, y;  // A = W, B = X, C = D = Y
};
Types types_of(const GemmConfig& cfg) {
  return {cuda_type(cfg.w_format), cuda_type(cfg.x_format), cuda_type(cfg.y_format)};
}

void check_args(const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args) {
  FP8SIM_REQUIRE(s.m > 0 && s.n > 0 && s.k > 0, "GEMM shape must be positive, got M={} N={} K={}", s.m, s.n, s.k);
  FP8SIM_REQUIRE(s.m <= INT32_MAX && s.n <= INT32_MAX && s.k <= INT32_MAX, "GEMM dimension too large");
  const bool fp8 = cfg.scaling != GemmScaling::None;
  if (fp8) {
    FP8SIM_REQUIRE(is_fp8(cfg.x_format) && is_fp8(cfg.w_format), "scaled GEMM needs FP8 operands, got {} x {}",
                   format_name(cfg.x_format), format_name(cfg.w_format));
  } else {
    FP8SIM_REQUIRE(cfg.x_format == Format::BF16 && cfg.w_format == Format::BF16,
                   "unscaled GEMM takes BF16 operands, got {} x {}", format_name(cfg.x_format),
                   format_name(cfg.w_format));
  }
  FP8SIM_REQUIRE(cfg.y_format == Format::BF16 || cfg.y_format == Format::FP32, "GEMM output must be bf16 or fp32");
  FP8SIM_REQUIRE(args.x && args.w && args.y, "GEMM operands must be device pointers");
  FP8SIM_REQUIRE(!fp8 || (args.x_scale && args.w_scale), "scaled GEMM needs both scale pointers");
  if (cfg.scaling == GemmScaling::Block || cfg.scaling == GemmScaling::Block1D) {
    // "cuBLAS Library", 128-element 1D and 128x128 2D block scaling, "Scaling factors layouts":
    // "M and N must be multiples of 4" (D is N x M here) and the scaling factors' starting
    // addresses "must be 16B aligned". cuBLASLt checks neither.
    FP8SIM_REQUIRE(s.m % 4 == 0 && s.n % 4 == 0,
                   "block-scaled GEMM needs M and N multiples of 4 (cuBLAS's scale layouts), got M={} N={}", s.m, s.n);
    FP8SIM_REQUIRE(alignment_of(args.x_scale) >= 16 && alignment_of(args.w_scale) >= 16,
                   "block-scaled GEMM needs 16-byte-aligned scale tables (cuBLAS's scale layouts)");
  }
}

// Operation descriptor and layouts, every attribute explicit; the scale pointers are args'.
void build_descriptors(GemmPlan::Impl& im, const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args) {
  const bool fp8 = cfg.scaling != GemmScaling::None;
  FP8SIM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&im.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, static_cast<int32_t>(CUDA_R_32F));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, static_cast<int32_t>(CUBLASLT_POINTER_MODE_HOST));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(cfg.w_transposed ? CUBLAS_OP_N : CUBLAS_OP_T));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(cfg.x_transposed ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_TRANSC, static_cast<int32_t>(CUBLAS_OP_N));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_DEFAULT));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, int32_t{0});
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(nullptr));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(nullptr));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(nullptr));
  set_desc(im.desc, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, static_cast<const void*>(nullptr));
  if (fp8) {
    // FAST_ACCUM = 0: partial sums are promoted to fp32 periodically ("split" accumulation).
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(cfg.fast_accum ? 1 : 0));
    int32_t a_mode = scale_mode(cfg.scaling), b_mode = scale_mode(cfg.scaling);
    if (cfg.scaling == GemmScaling::Block) {
      a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // A = W: 128x128 blocks
      b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // B = X: 1x128 groups along K
    }
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    im.a_scale = args.w_scale;
    im.b_scale = args.x_scale;
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(im.a_scale));
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(im.b_scale));
  } else {
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(nullptr));
    set_desc(im.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(nullptr));
  }

  // ---- layouts (column-major views of the row-major tensors; see the header) ----
  const Types t = types_of(cfg);
  // W (N, K) row-major is K x N column-major (ld K), used transposed; stored (K, N) row-major it is
  // N x K column-major (ld N), used as is. Likewise X.
  if (cfg.w_transposed) FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.a, t.a, s.n, s.k, s.n));
  else FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.a, t.a, s.k, s.n, s.k));
  if (cfg.x_transposed) FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.b, t.b, s.m, s.k, s.m));
  else FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.b, t.b, s.k, s.m, s.k));
  FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.c, t.y, s.n, s.m, s.n));  // Y: N x M, ld N
  FP8SIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&im.d, t.y, s.n, s.m, s.n));
  for (auto* l : {im.a, im.b, im.c, im.d}) {
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_ORDER, static_cast<int32_t>(CUBLASLT_ORDER_COL));
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{1});
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t{0});
  }
}

// The preference: workspace, reduction schemes and the operands' alignments (A B C D).
struct Preference {
  struct Owned {
    cublasLtMatmulPreference_t p = nullptr;
    ~Owned() {
      if (p) cublasLtMatmulPreferenceDestroy(p);
    }
  } h;
  uint32_t al[4] = {};
  Preference(const GemmArgs& args, size_t workspace_bytes) {
    FP8SIM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&h.p));
    set_pref(h.p, CUBLASLT_MATMUL_PREF_SEARCH_MODE, static_cast<uint32_t>(CUBLASLT_SEARCH_BEST_FIT));
    set_pref(h.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes));
    set_pref(h.p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK));
    // The search below holds its configurations to the same alignments.
    al[0] = alignment_of(args.w);
    al[1] = alignment_of(args.x);
    al[2] = alignment_of(args.y);
    al[3] = alignment_of(args.y);
    set_pref(h.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al[0]);
    set_pref(h.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al[1]);
    set_pref(h.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al[2]);
    set_pref(h.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al[3]);
  }
};

struct Heuristic {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::vector<cublasLtMatmulHeuristicResult_t> results;  // as many as it returned
  std::string refusal() const {
    return status != CUBLAS_STATUS_SUCCESS
               ? fmt::format("cublasLtMatmulAlgoGetHeuristic: {}", cublasLtGetStatusName(status))
               : std::string("cublasLtMatmulAlgoGetHeuristic: no algorithm for this configuration");
  }
};

Heuristic ask_heuristic(cublasLtHandle_t lt, const GemmPlan::Impl& im, const Preference& pref, int max_candidates) {
  const int want = std::max(1, std::min(max_candidates, 32));
  Heuristic h;
  h.results.resize(static_cast<size_t>(want));
  int returned = 0;
  h.status =
      cublasLtMatmulAlgoGetHeuristic(lt, im.desc, im.a, im.b, im.c, im.d, pref.h.p, want, h.results.data(), &returned);
  h.results.resize(h.status == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(std::max(returned, 0)) : 0);
  return h;
}

// Each attribute read with its documented width (the cluster shape is 16-bit).
GemmAlgoInfo info_of(const cublasLtMatmulAlgo_t& algo) {
  auto cfg_attr = [&]<class V>(cublasLtMatmulAlgoConfigAttributes_t a, V) {
    V v{};
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
    return static_cast<int>(v);
  };
  GemmAlgoInfo i;
  i.algo_id = cfg_attr(CUBLASLT_ALGO_CONFIG_ID, int32_t{});
  i.tile_id = cfg_attr(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{});
  i.splitk = cfg_attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{});
  i.stages_id = cfg_attr(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{});
  i.cluster_id = cfg_attr(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{});
  i.swizzle = cfg_attr(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{});
  return i;
}

uint32_t tile_of(const cublasLtMatmulAlgo_t& a) {
  uint32_t t = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &t, sizeof t, &w);
  return t;
}

// ---- the search's enumeration ------------------------------------------------------------------------

struct SearchConfig {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  std::string excluded;  // empty: the search may time it
};

// What the enumeration saw: the configurations it left out and, when it accepted none, why.
struct SearchStats {
  int excluded = 0;                   // accepted by cublasLtMatmulAlgoCheck, left out by search_exclusion
  int checks = 0;                     // cublasLtMatmulAlgoCheck calls
  std::map<int, int> check_statuses;  // cublasStatus_t of the rejected checks -> count
  int over_workspace = 0;             // accepted, but needing more workspace than ours
  // cublasLtMatmulAlgoCheck on the heuristic's own first configuration: the test of whether the
  // check can judge this mode at all.
  cublasStatus_t heuristic_check = CUBLAS_STATUS_SUCCESS;
  // Set when the configurations from cublasLtMatmulAlgoInit's defaults gave nothing and the
  // search varied the heuristic's own instead: what the first pass saw.
  struct Pass {
    int checks = 0;
    std::map<int, int> check_statuses;
    int over_workspace = 0;
  };
  std::optional<Pass> init_pass;

  static std::string rejections(const Pass& p) {
    std::string st;
    for (const auto& [code, n] : p.check_statuses)
      st +=
          fmt::format("{}{} x{}", st.empty() ? "" : ", ", cublasLtGetStatusName(static_cast<cublasStatus_t>(code)), n);
    return fmt::format("cublasLtMatmulAlgoCheck accepted none of {} configurations ({}{})", p.checks,
                       st.empty() ? "no rejections" : st,
                       p.over_workspace ? fmt::format(", {} over the workspace", p.over_workspace) : "");
  }
  Pass totals() const { return {checks, check_statuses, over_workspace}; }

  // Empty when the first pass found something; else one sentence naming why it did not and
  // what the search did instead.
  std::string note(size_t accepted) const {
    if (init_pass && (accepted > 0 || excluded > 0))
      return rejections(*init_pass) +
             " built from cublasLtMatmulAlgoInit's defaults; the search varies the heuristic's own configurations";
    if (accepted > 0 || excluded > 0) return {};
    std::string s = rejections(totals());
    if (heuristic_check != CUBLAS_STATUS_SUCCESS)
      s += fmt::format(
          "; it returns {} for the heuristic's own first configuration too, so this cuBLASLt cannot "
          "check configurations of this mode and only the heuristic's are used",
          cublasLtGetStatusName(heuristic_check));
    return s;
  }
};

struct SearchLimits {
  int accepted = INT_MAX;      // stop once this many non-excluded configurations are found
  bool keep_excluded = false;  // list the excluded ones too (flagged)
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Every algorithm id x tile x stages x cluster shape x CTA swizzle that cublasLtMatmulAlgoCheck
// accepts for these descriptors and the operands' alignments (no split-K), those of the
// heuristic's tiles first. `stats` counts what was checked, rejected and left out (search_exclusion).
std::vector<SearchConfig> enumerate_search(cublasLtHandle_t lt, const GemmPlan::Impl& im, const GemmConfig& cfg,
                                           const Heuristic& heur, const uint32_t al[4], size_t workspace_bytes,
                                           const SearchLimits& lim, SearchStats& stats) {
  const Types t = types_of(cfg);
  std::vector<SearchConfig> found;
  int accepted = 0;
  stats = SearchStats{};
  for (const auto& r : heur.results) {
    if (r.state != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulHeuristicResult_t chk{};
    cublasLtMatmulAlgo_t algo = r.algo;
    stats.heuristic_check = cublasLtMatmulAlgoCheck(lt, im.desc, im.a, im.b, im.c, im.d, &algo, &chk);
    break;
  }
  // Algorithm ids: the heuristic's own first, then the rest of what the library lists; and the
  // heuristic's tiles, whose configurations come first.
  std::vector<int> ids;
  std::vector<uint32_t> heur_tiles;
  auto add_id = [&](int id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (const auto& r : heur.results) {
    if (r.state != CUBLAS_STATUS_SUCCESS) continue;
    int32_t id = -1;
    size_t w = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w) ==
        CUBLAS_STATUS_SUCCESS)
      add_id(id);
    heur_tiles.push_back(tile_of(r.algo));
  }
  {
    int listed[128];
    int nlisted = 0;
    if (cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t.a, t.b, t.y, t.y, 128, listed, &nlisted) ==
        CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < nlisted; ++i) add_id(listed[i]);
  }
  const int nids = static_cast<int>(ids.size());
  // AlgoCheck cannot see the operands' addresses: a configuration needing more alignment than
  // they have would fail at launch, so it is left out here (as the heuristic's preferences do).
  auto aligned_enough = [&](const cublasLtMatmulAlgo_t& algo) {
    const cublasLtMatmulAlgoCapAttributes_t caps[4] = {
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      uint32_t need = 0;
      size_t w = 0;
      if (cublasLtMatmulAlgoCapGetAttribute(&algo, caps[i], &need, sizeof need, &w) == CUBLAS_STATUS_SUCCESS &&
          need > al[i])
        return false;
    }
    return true;
  };
  auto cap_array = [](const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    std::vector<uint32_t> v;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
      return std::vector<uint32_t>{0u};
    v.resize(bytes / sizeof(uint32_t));
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS || v.empty())
      return std::vector<uint32_t>{0u};
    return v;
  };
  // Cluster shapes: auto, 1x1, 2x1, 1x2 (cublasLtClusterShape_t).
  const uint16_t clusters[] = {0, 2, 3, 5};
  constexpr int kMaxChecks = 200000;  // AlgoCheck is host-only, a few microseconds each
  auto more = [&] {
    return accepted < lim.accepted && stats.checks < kMaxChecks && std::chrono::steady_clock::now() < lim.deadline;
  };
  // Every tile x stages x cluster shape x swizzle of `base` that AlgoCheck accepts. A
  // cublasLtMatmulAlgoInit base has cluster shape auto; a heuristic's base gets it set.
  auto vary = [&](const cublasLtMatmulAlgo_t& base, bool from_heuristic) {
    if (!aligned_enough(base)) return;
    const std::vector<uint32_t> tiles = cap_array(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    const std::vector<uint32_t> stages = cap_array(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    uint32_t swz_cap = 0;
    size_t wr = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_cap, sizeof swz_cap,
                                          &wr) != CUBLAS_STATUS_SUCCESS)
      swz_cap = 0;
    const int32_t splitk = 1;
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
    for (const uint32_t tile : tiles)
      for (const uint32_t stage : stages)
        for (const uint16_t cl : clusters)
          for (uint32_t swz = 0; swz <= (swz_cap ? 1u : 0u) && more(); ++swz) {
            cublasLtMatmulAlgo_t algo = base;
            if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof stage) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red) ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz))
              continue;
            if ((cl != 0 || from_heuristic) &&
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl))
              continue;
            ++stats.checks;
            cublasLtMatmulHeuristicResult_t chk{};
            const cublasStatus_t st = cublasLtMatmulAlgoCheck(lt, im.desc, im.a, im.b, im.c, im.d, &algo, &chk);
            if (st != CUBLAS_STATUS_SUCCESS) {
              ++stats.check_statuses[static_cast<int>(st)];
              continue;
            }
            if (chk.workspaceSize > workspace_bytes) {
              ++stats.over_workspace;
              continue;
            }
            // Checked after AlgoCheck, so that plan() and enumerate() count the same checks.
            std::string why = search_exclusion(cfg, tile);
            if (!why.empty()) {
              ++stats.excluded;
              if (lim.keep_excluded) found.push_back({algo, chk.workspaceSize, std::move(why)});
              continue;
            }
            ++accepted;
            found.push_back({algo, chk.workspaceSize, {}});
          }
  };
  // Every listed algorithm from cublasLtMatmulAlgoInit's defaults.
  for (int a = 0; a < nids && more(); ++a) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t.a, t.b, t.y, t.y, ids[a], &base) ==
        CUBLAS_STATUS_SUCCESS)
      vary(base, false);
  }
  // For some modes (1x128 x 1x128 block scaling on cuBLASLt 13) AlgoCheck accepts no configuration
  // built from those defaults but does accept variations of the heuristic's own configurations,
  // which keep what the heuristic set beyond the attributes varied (custom option, inner shape).
  // Those are the fallback only: for the modes the defaults serve, the exclusion rule above was
  // established on the defaults' configurations.
  if (found.empty() && stats.checks > 0 && stats.heuristic_check == CUBLAS_STATUS_SUCCESS) {
    stats.init_pass = stats.totals();
    std::vector<int> seen;
    for (const auto& r : heur.results) {
      int32_t id = -1;
      size_t w = 0;
      if (r.state != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w) !=
              CUBLAS_STATUS_SUCCESS ||
          std::find(seen.begin(), seen.end(), id) != seen.end())
        continue;
      seen.push_back(id);
      if (more()) vary(r.algo, true);
    }
  }
  // The heuristic's tiles first (other stages, clusters, swizzles of what it predicted best).
  std::stable_partition(found.begin(), found.end(), [&](const SearchConfig& f) {
    return std::find(heur_tiles.begin(), heur_tiles.end(), tile_of(f.algo)) != heur_tiles.end();
  });
  return found;
}

// ---- validation --------------------------------------------------------------------------------------

// Scale 2^e, e in {-2, ..., 2}, from a hash of (salt, i): neighbouring rows and blocks get
// different scales, so that a kernel reading another row's or block's scale changes the result.
float validation_scale(uint64_t salt, uint64_t i) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  z ^= z >> 31;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 29;
  return std::ldexp(1.0f, static_cast<int>(z % 5) - 2);
}

// Runs candidates once on the plan's shape and compares each output with the reference
// algorithm's. Operands: the caller's X and W, with scale tables of its own in the plan's layouts
// (the caller's may be uniform, which would hide a kernel reading the wrong scale). Writes the
// caller's Y; restores the descriptor's scale pointers after each run.
class Validator {
 public:
  enum class Outcome { Agrees, Disagrees, LaunchFailed };

  Validator(GemmPlan::Impl& im, const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args, cublasLtHandle_t lt,
            void* workspace, size_t workspace_bytes, cudaStream_t stream)
      : im_(im),
        s_(s),
        cfg_(cfg),
        args_(args),
        lt_(lt),
        ws_(workspace),
        ws_bytes_(workspace_bytes),
        stream_(stream),
        tol_(gemm_agreement_tolerance(s.k, cfg)) {
    size_t na = 0, nb = 0;  // A = W, B = X
    const int64_t kb = (s.k + 127) / 128;
    switch (cfg.scaling) {
      case GemmScaling::None:
        break;
      case GemmScaling::Tensor:
        na = nb = 1;
        break;
      case GemmScaling::Row:
        na = static_cast<size_t>(s.n);
        nb = static_cast<size_t>(s.m);
        break;
      case GemmScaling::Block:
        na = static_cast<size_t>((kb + 3) / 4 * 4 * ((s.n + 127) / 128));
        nb = static_cast<size_t>(s.m * kb);
        break;
      case GemmScaling::Block1D:
        na = static_cast<size_t>(s.n * kb);
        nb = static_cast<size_t>(s.m * kb);
        break;
    }
    if (na) {
      std::vector<float> a(na), b(nb);
      for (size_t i = 0; i < na; ++i) a[i] = validation_scale(0xA5A5, i);
      for (size_t i = 0; i < nb; ++i) b[i] = validation_scale(0x5A5A, i);
      a_scale_ = to_device(a, stream);
      b_scale_ = to_device(b, stream);
    }
  }

  const GemmAgreementTolerance& tolerance() const { return tol_; }

  // The reference's output; false (and the status in `error`) when cuBLASLt refuses to launch it.
  bool set_reference(const cublasLtMatmulAlgo_t& algo, std::string& error) {
    if (!run_once(algo, ref_, error)) return false;
    have_ref_ = true;
    return true;
  }

  Outcome check(const cublasLtMatmulAlgo_t& algo, std::string& reason) {
    FP8SIM_CHECK(have_ref_, "validation without a reference output");
    if (!run_once(algo, out_, reason)) return Outcome::LaunchFailed;
    const GemmAgreement g = check_gemm_agreement(out_.data(), ref_.data(), s_.m, s_.n, tol_);
    if (g.agrees()) return Outcome::Agrees;
    reason =
        fmt::format("disagrees with the reference algorithm on M={} N={} K={}: {}", s_.m, s_.n, s_.k, g.describe());
    return Outcome::Disagrees;
  }

 private:
  void use_scales(const float* a, const float* b) {
    if (cfg_.scaling == GemmScaling::None) return;
    set_desc(im_.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(a));
    set_desc(im_.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(b));
  }

  // One launch on the validation operands into the caller's Y (poisoned first: NaN in bf16 and
  // fp32, so that an element the kernel leaves unwritten shows), then Y as fp32 on the host.
  bool run_once(const cublasLtMatmulAlgo_t& algo, std::vector<float>& y, std::string& error) {
    const size_t count = static_cast<size_t>(s_.m * s_.n), es = elem_bytes(cfg_.y_format);
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(args_.y, 0xFF, count * es, stream_));
    use_scales(a_scale_.get(), b_scale_.get());
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(lt_, im_.desc, &alpha, args_.w, im_.a, args_.x, im_.b, &beta, args_.y,
                                             im_.c, args_.y, im_.d, &algo, ws_, ws_bytes_, stream_);
    use_scales(im_.a_scale, im_.b_scale);
    if (st != CUBLAS_STATUS_SUCCESS) {
      error = fmt::format("cublasLtMatmul: {}", cublasLtGetStatusName(st));
      return false;
    }
    y.resize(count);
    if (cfg_.y_format == Format::FP32) {
      FP8SIM_CUDA_CHECK(cudaMemcpyAsync(y.data(), args_.y, count * es, cudaMemcpyDeviceToHost, stream_));
      FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } else {
      raw_.resize(count);
      FP8SIM_CUDA_CHECK(cudaMemcpyAsync(raw_.data(), args_.y, count * es, cudaMemcpyDeviceToHost, stream_));
      FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 18))
      for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = bf16_to_f32(raw_[static_cast<size_t>(i)]);
    }
    return true;
  }

  GemmPlan::Impl& im_;
  GemmShape s_;
  GemmConfig cfg_;
  GemmArgs args_;
  cublasLtHandle_t lt_;
  void* ws_;
  size_t ws_bytes_;
  cudaStream_t stream_;
  GemmAgreementTolerance tol_;
  DeviceBuffer<float> a_scale_, b_scale_;
  std::vector<float> ref_, out_;
  std::vector<uint16_t> raw_;
  bool have_ref_ = false;
};

// ---- candidate selection (CublasLt::plan) ------------------------------------------------------------

// A CUDA event, destroyed with its owner.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { FP8SIM_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Launches of one plan's descriptors on the caller's operands, timed with CUDA events.
class CandidateTimer {
 public:
  CandidateTimer(cublasLtHandle_t lt, const GemmPlan::Impl& im, const GemmArgs& args, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream)
      : lt_(lt), im_(im), args_(args), ws_(workspace), ws_bytes_(workspace_bytes), stream_(stream) {}

  // One untimed launch (when `warm`; it must run), then `reps` timed ones: their median in ms (of
  // an even count, the lower middle); 0 once the untimed launch completed when reps <= 0; < 0 when
  // cuBLASLt refused to launch, the reason then in `error`.
  float time(const cublasLtMatmulAlgo_t& algo, int reps, bool warm, std::string& error) {
    cublasStatus_t st = warm ? launch(algo) : CUBLAS_STATUS_SUCCESS;
    if (st != CUBLAS_STATUS_SUCCESS) {
      error = fmt::format("cublasLtMatmul: {}", cublasLtGetStatusName(st));
      return -1.0f;
    }
    if (reps <= 0) {
      FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return 0.0f;
    }
    std::vector<float> times;
    for (int r = 0; r < reps; ++r) {
      FP8SIM_CUDA_CHECK(cudaEventRecord(e0_.e, stream_));
      st = launch(algo);
      FP8SIM_CUDA_CHECK(cudaEventRecord(e1_.e, stream_));
      FP8SIM_CUDA_CHECK(cudaEventSynchronize(e1_.e));
      if (st != CUBLAS_STATUS_SUCCESS) {
        error = fmt::format("cublasLtMatmul: {}", cublasLtGetStatusName(st));
        return -1.0f;
      }
      float t = 0;
      FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&t, e0_.e, e1_.e));
      times.push_back(t);
    }
    std::sort(times.begin(), times.end());
    return times[(times.size() - 1) / 2];
  }

 private:
  cublasLtHandle_t lt_;
  const GemmPlan::Impl& im_;
  GemmArgs args_;
  void* ws_;
  size_t ws_bytes_;
  cudaStream_t stream_;
  Event e0_, e1_;

  cublasStatus_t launch(const cublasLtMatmulAlgo_t& algo) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(lt_, im_.desc, &alpha, args_.w, im_.a, args_.x, im_.b, &beta, args_.y, im_.c, args_.y, im_.d,
                          &algo, ws_, ws_bytes_, stream_);
  }
};

struct Timed {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  float ms;
};

// What the selection records besides its choice (CublasLt::plan copies it into the GemmPlan).
struct SelectionRecord {
  bool validation = false;  // candidates were validated against validation_reference
  GemmAlgoInfo validation_reference;
  GemmAgreementTolerance validation_tolerance;
  int validated = 0;  // candidates compared with the reference (itself not counted)
  std::vector<GemmRejection> rejected;
  int search_found = 0, searched = 0, search_excluded = 0;
  std::string search_note;  // SearchStats::note
};

// The choice of CublasLt::plan among the heuristic's candidates and, optionally, the search's:
// nothing is timed before its output matches the reference's (when there is a reference), and
// the fastest finalist wins. The steps, each at most once and in this order: choose_reference
// (when validating), time_heuristic, search (when it found a finalist and a search was asked
// for), then pick.
class CandidateSelection {
 public:
  CandidateSelection(cublasLtHandle_t lt, GemmPlan::Impl& im, const Heuristic& heur, const GemmArgs& args,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream)
      : lt_(lt),
        im_(im),
        heur_(heur),
        args_(args),
        ws_(workspace),
        ws_bytes_(workspace_bytes),
        stream_(stream),
        timer_(lt, im, args, workspace, workspace_bytes, stream) {}

  // Validation (with a choice to make: timing, and more than one candidate or a search): the
  // heuristic's first candidate that runs becomes the reference (the tests check it against the
  // CPU reference) that every other candidate, the heuristic's and the search's, must agree with
  // on this shape before it is timed; see the header. False when no candidate runs.
  bool choose_reference(const GemmShape& s, const GemmConfig& cfg) {
    val_.emplace(im_, s, cfg, args_, lt_, ws_, ws_bytes_, stream_);
    const auto& results = heur_.results;
    for (int i = 0; i < static_cast<int>(results.size()) && ref_i_ < 0; ++i)
      if (usable(i) && val_->set_reference(results[i].algo, last_error_)) ref_i_ = i;
    if (ref_i_ < 0) return false;
    record_.validation = true;
    record_.validation_reference = info_of(results[ref_i_].algo);
    record_.validation_reference.workspace = results[ref_i_].workspaceSize;
    record_.validation_tolerance = val_->tolerance();
    return true;
  }

  // The heuristic's candidates in its order, each validated, then timed with `timing_reps`
  // repeats; the fastest becomes the first finalist (with timing_reps <= 0: the first that runs).
  // False when none ran.
  bool time_heuristic(int timing_reps) {
    const auto& results = heur_.results;
    int best = -1;
    float best_ms = 0;
    for (int i = 0; i < static_cast<int>(results.size()); ++i) {
      if (!usable(i)) continue;
      if (val_ && i < ref_i_) continue;  // refused to launch as the reference
      if (i != ref_i_ && !passes_validation(results[i].algo, results[i].workspaceSize, false)) continue;
      const float ms = timer_.time(results[i].algo, timing_reps, true, last_error_);
      if (ms < 0) continue;
      if (best < 0 || ms < best_ms) {
        best = i;
        best_ms = ms;
      }
      if (timing_reps <= 0) break;  // heuristic order: the first that runs
    }
    FP8SIM_CUDA_CHECK(cudaGetLastError());
    if (best < 0) return false;
    finalists_.push_back({results[best].algo, results[best].workspaceSize, best_ms});
    return true;
  }

  // The search over the configurations cuBLASLt accepts (after time_heuristic found a finalist):
  // up to `search` of them, each validated and timed quickly, within ~6 s; then the fastest six
  // join the finalists, and every finalist is timed again with `timing_reps` repeats in the same
  // round.
  void search(const GemmConfig& cfg, const Preference& pref, int search, int timing_reps) {
    constexpr auto kBudget = std::chrono::seconds(6);  // enumeration, validation and quick timings
    const auto t_start = std::chrono::steady_clock::now();
    SearchLimits lim;
    lim.accepted = search;
    lim.deadline = t_start + kBudget;
    SearchStats stats;
    const std::vector<SearchConfig> found = enumerate_search(lt_, im_, cfg, heur_, pref.al, ws_bytes_, lim, stats);
    record_.search_excluded = stats.excluded;
    record_.search_note = stats.note(found.size());
    record_.search_found = static_cast<int>(found.size());
    std::vector<Timed> ran = quick_time(found, t_start + kBudget);
    record_.searched = static_cast<int>(ran.size());
    std::sort(ran.begin(), ran.end(), [](const Timed& x, const Timed& y) { return x.ms < y.ms; });
    for (size_t i = 0; i < ran.size() && i < 6; ++i) finalists_.push_back(ran[i]);
    for (auto& f : finalists_) f.ms = timer_.time(f.algo, timing_reps, true, last_error_);
  }

  // The index of the fastest finalist that ran (0: the heuristic's; above: the search's), or -1.
  int pick() const {
    int pick = -1;
    for (size_t i = 0; i < finalists_.size(); ++i)
      if (finalists_[i].ms >= 0 && (pick < 0 || finalists_[i].ms < finalists_[static_cast<size_t>(pick)].ms))
        pick = static_cast<int>(i);
    return pick;
  }
  const Timed& finalist(int i) const { return finalists_[static_cast<size_t>(i)]; }
  const SelectionRecord& record() const { return record_; }
  // The plan's status when nothing runs: the last launch refusal, if any.
  std::string failure() const { return last_error_.empty() ? "no heuristic candidate could run" : last_error_; }

 private:
  cublasLtHandle_t lt_;
  GemmPlan::Impl& im_;
  const Heuristic& heur_;
  GemmArgs args_;
  void* ws_;
  size_t ws_bytes_;
  cudaStream_t stream_;
  CandidateTimer timer_;
  std::optional<Validator> val_;
  int ref_i_ = -1;
  std::vector<Timed> finalists_;  // the heuristic's best, then the search's fastest
  SelectionRecord record_;
  std::string last_error_;

  bool usable(int i) const {
    const auto& r = heur_.results[static_cast<size_t>(i)];
    return r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws_bytes_;
  }

  // true: the candidate may be timed; false: it did not launch, or it disagrees (then recorded).
  bool passes_validation(const cublasLtMatmulAlgo_t& algo, size_t workspace, bool from_search) {
    if (!val_) return true;
    std::string why;
    const Validator::Outcome o = val_->check(algo, why);
    if (o == Validator::Outcome::LaunchFailed) {
      last_error_ = why;
      return false;
    }
    ++record_.validated;
    if (o == Validator::Outcome::Agrees) return true;
    GemmRejection r;
    r.algo = info_of(algo);
    r.algo.from_search = from_search;
    r.algo.workspace = workspace;
    r.reason = std::move(why);
    record_.rejected.push_back(std::move(r));
    return false;
  }

  // A validation run each (the first launch also loads the kernel's module, lazily loaded by
  // CUDA), then a quick timing: one timed launch, and two more only when that one is within 25%
  // of the best so far (a config with a tiny tile can be 100x slower on these shapes); stops at
  // `deadline`. The heuristic's tiles come first (enumerate_search).
  std::vector<Timed> quick_time(const std::vector<SearchConfig>& found,
                                std::chrono::steady_clock::time_point deadline) {
    std::vector<Timed> ran;
    float quick_best = finalists_.front().ms;
    for (const auto& f : found) {
      if (std::chrono::steady_clock::now() > deadline) break;
      if (!passes_validation(f.algo, f.workspace, true)) continue;
      const float one = timer_.time(f.algo, 1, false, last_error_);
      if (one <= 0) continue;
      const float ms =
          one <= 1.25f * quick_best ? std::min(one, timer_.time(f.algo, 2, false, last_error_)) : one;  // min of 3
      if (ms <= 0) continue;
      quick_best = std::min(quick_best, ms);
      ran.push_back({f.algo, f.workspace, ms});
    }
    cudaGetLastError();  // a refused configuration leaves no sticky error, but clear a soft one
    return ran;
  }
};

}  // namespace

std::string_view gemm_scaling_name(GemmScaling s) {
  switch (s) {
    case GemmScaling::None:
      return "none";
    case GemmScaling::Tensor:
      return "tensor";
    case GemmScaling::Row:
      return "row";
    case GemmScaling::Block:
      return "block1x128_128x128";
    case GemmScaling::Block1D:
      return "block1x128_1x128";
  }
  return "?";
}

std::string GemmConfig::describe() const {
  const std::string layout = fmt::format("{}{}", x_transposed ? " X^T-stored" : "", w_transposed ? " W^T-stored" : "");
  if (scaling == GemmScaling::None)
    return fmt::format("{}x{}->{}{}", format_name(x_format), format_name(w_format), format_name(y_format), layout);
  return fmt::format("{}x{}->{} scale={} accum={}{}", format_name(x_format), format_name(w_format),
                     format_name(y_format), gemm_scaling_name(scaling), fast_accum ? "fast" : "split", layout);
}

std::string GemmAlgoInfo::tile() const {
  if (tile_id == 0) return "undefined";
  int rows = 0, cols = 0;
  if (tile_dims(tile_id, rows, cols)) return fmt::format("{}x{}", rows, cols);
  return fmt::format("id {}", tile_id);
}

Json GemmAlgoInfo::to_json() const {
  Json a = Json::object();
  a["algo_id"] = algo_id;
  a["tile_id"] = tile_id;
  a["splitk"] = splitk;
  a["stages_id"] = stages_id;
  a["cluster_shape_id"] = cluster_id;
  a["cta_swizzling"] = swizzle;
  a["from_search"] = from_search;
  a["workspace_bytes"] = workspace;
  a["selection_median_ms"] = median_ms;
  a["tile"] = tile();
  return a;
}

// ---- agreement between two algorithms ---------------------------------------------------------------
//
// Two cuBLASLt algorithms compute the same GEMM from the same operands; each errs from the exact
// result by its own accumulation error, in the model of sim/gemm/gemm_ref.cpp: FP8 tensor cores keep
// about 14 bits while they accumulate (eps = 2^-13 per step) and cuBLAS promotes the partial sum to
// fp32 every L elements of K (gemm_tolerance's promote_interval: 128 for split accumulation and block
// scaling, K for fast accumulation); BF16 accumulates in fp32 (eps = 2u = 2^-23 per step, allowing a
// truncating adder), L = K. With independent errors of mean zero, a sum of L terms errs by about
// sqrt(L) eps times the size of its running sums (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019),
// and the fp32 sum of the promoted chunks keeps that relative size: sigma = sqrt(L) eps. Two results
// differ by about sqrt(2) sigma in RMS.
//   rel_fro = 8 sigma + out: a margin of 8 / sqrt(2) ~ 5.7 over that RMS difference, for a biased
//     (truncating) accumulator and for running sums larger than the result (cancellation);
//   rel_elem = 32 sigma, on P_ij + |ref_ij|: four times the Frobenius factor, as the largest of
//     millions of elementwise differences lies several standard deviations out and P_ij (the output's
//     row and column scale) only estimates the size of the running sums at (i, j);
//   rel_out = out: each result's output rounding, bf16 2^-9 |y| and fp32 2^-24 |y|, twice;
//   abs_floor = 2^-126: results that underflow.
// Split or block FP8 (L = 128): rel_fro = 0.011, while an algorithm that applies another block's
// scale (the validation's scales differ by factors 2 to 16) to one 128-block of K in eight moves the
// result by about 0.18 of its norm or more.
GemmAgreementTolerance gemm_agreement_tolerance(int64_t k, const GemmConfig& cfg) {
  FP8SIM_REQUIRE(k > 0, "GEMM K must be positive, got {}", k);
  gemm::GemmNumerics num;
  num.x_format = cfg.x_format;
  num.w_format = cfg.w_format;
  num.y_format = cfg.y_format;
  num.fp8 = cfg.scaling != GemmScaling::None;
  num.fast_accum = cfg.fast_accum;
  num.block_scaled = cfg.scaling == GemmScaling::Block || cfg.scaling == GemmScaling::Block1D;
  const int64_t L = num.fp8 ? gemm::gemm_tolerance(k, num).promote_interval : k;
  const double eps = num.fp8 ? 0x1p-13 : 0x1p-23;
  const double sigma = std::sqrt(static_cast<double>(L)) * eps;
  const double out = cfg.y_format == Format::BF16 ? 0x1p-8 : 0x1p-23;
  GemmAgreementTolerance t;
  t.rel_fro = 8.0 * sigma + out;
  t.rel_elem = 32.0 * sigma;
  t.rel_out = out;
  t.abs_floor = 0x1p-126;
  t.derivation = fmt::format(
      "sigma = sqrt(L={}) * {} = {:.3e}; ||test-ref||_F <= (8 sigma + {}) ||ref||_F = {:.3e} ||ref||_F; "
      "|test-ref| <= 32 sigma (P + |ref|) + {} |ref| + 2^-126",
      L, num.fp8 ? "2^-13" : "2^-23", sigma, cfg.y_format == Format::BF16 ? "2^-8" : "2^-23", t.rel_fro,
      cfg.y_format == Format::BF16 ? "2^-8" : "2^-23");
  return t;
}

Json GemmAgreementTolerance::to_json() const {
  Json j = Json::object();
  j["rel_fro"] = rel_fro;
  j["rel_elem"] = rel_elem;
  j["rel_out"] = rel_out;
  j["abs_floor"] = abs_floor;
  j["derivation"] = derivation;
  return j;
}

GemmAgreement check_gemm_agreement(const float* test, const float* ref, int64_t m, int64_t n,
                                   const GemmAgreementTolerance& tol) {
  FP8SIM_REQUIRE(m > 0 && n > 0, "GEMM output must be non-empty, got {} x {}", m, n);
  GemmAgreement g;
  g.elements = m * n;
  g.rel_fro_bound = tol.rel_fro;
  const bool par = m * n > (int64_t{1} << 16);
  // Row and column mean squares of the reference's finite values: P_ij = rms_i * rms_j / rms.
  std::vector<double> row(static_cast<size_t>(m), 0.0), col(static_cast<size_t>(n), 0.0);
  double all = 0;
#pragma omp parallel if (par)
  {
    std::vector<double> c(static_cast<size_t>(n), 0.0);
#pragma omp for schedule(static) reduction(+ : all)
    for (int64_t i = 0; i < m; ++i) {
      double r = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = ref[i * n + j];
        if (std::isfinite(v)) {
          r += v * v;
          c[static_cast<size_t>(j)] += v * v;
        }
      }
      row[static_cast<size_t>(i)] = std::sqrt(r / static_cast<double>(n));
      all += r;
    }
#pragma omp critical
    for (int64_t j = 0; j < n; ++j) col[static_cast<size_t>(j)] += c[static_cast<size_t>(j)];
  }
  for (auto& v : col) v = std::sqrt(v / static_cast<double>(m));
  const double rms = std::sqrt(all / static_cast<double>(m * n));

  double err2 = 0, ref2 = 0;
  int64_t over = 0, mismatch = 0;
  int64_t first_mismatch = INT64_MAX, worst = -1;
  double worst_ratio = -1;
#pragma omp parallel if (par)
  {
    int64_t my_first = INT64_MAX, my_worst = -1;
    double my_ratio = -1;
#pragma omp for schedule(static) reduction(+ : err2, ref2, over, mismatch)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t idx = i * n + j;
        const float a = test[idx], b = ref[idx];
        const bool fa = std::isfinite(a), fb = std::isfinite(b);
        if (!fa || !fb) {
          // The same non-finite value at the same place agrees (NaN with NaN, +Inf with +Inf).
          if (!((std::isnan(a) && std::isnan(b)) || (!fa && !fb && a == b))) {
            ++mismatch;
            my_first = std::min(my_first, idx);
          }
          continue;
        }
        const double err = std::fabs(static_cast<double>(a) - static_cast<double>(b));
        const double p = rms > 0 ? row[static_cast<size_t>(i)] * col[static_cast<size_t>(j)] / rms : 0.0;
        const double ab = std::fabs(static_cast<double>(b));
        const double ratio = err / (tol.rel_elem * (p + ab) + tol.rel_out * ab + tol.abs_floor);
        if (ratio > 1.0) ++over;
        if (ratio > my_ratio) {
          my_ratio = ratio;
          my_worst = idx;
        }
        err2 += err * err;
        ref2 += ab * ab;
      }
    }
#pragma omp critical
    {
      first_mismatch = std::min(first_mismatch, my_first);
      if (my_worst >= 0 && (my_ratio > worst_ratio || (my_ratio == worst_ratio && my_worst < worst))) {
        worst_ratio = my_ratio;
        worst = my_worst;
      }
    }
  }
  g.over_tolerance = over;
  g.nonfinite_mismatch = mismatch;
  g.rel_fro = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
  g.fro_ok = g.rel_fro <= tol.rel_fro;
  const int64_t at = mismatch > 0 ? first_mismatch : worst;  // a non-finite mismatch is the worst
  g.max_err_over_bound = mismatch > 0 ? INFINITY : std::max(worst_ratio, 0.0);
  if (at >= 0) {
    g.worst_row = at / n;
    g.worst_col = at % n;
    g.worst_test = test[at];
    g.worst_ref = ref[at];
  }
  return g;
}

std::string GemmAgreement::describe() const {
  return fmt::format(
      "rel. Frobenius difference {:.3g} (bound {:.3g}), {} of {} elements over the elementwise bound, {} "
      "non-finite mismatches, worst at ({}, {}): {} vs reference {} ({:.3g}x the bound)",
      rel_fro, rel_fro_bound, over_tolerance, elements, nonfinite_mismatch, worst_row, worst_col, worst_test, worst_ref,
      max_err_over_bound);
}

// ---- plans ----------------------------------------------------------------------------------------

GemmPlan::GemmPlan() = default;
GemmPlan::~GemmPlan() = default;
GemmPlan::GemmPlan(GemmPlan&&) noexcept = default;
GemmPlan& GemmPlan::operator=(GemmPlan&&) noexcept = default;

Json GemmPlan::to_json() const {
  Json j = Json::object();
  j["m"] = shape_.m;
  j["n"] = shape_.n;
  j["k"] = shape_.k;
  j["x_format"] = std::string(format_name(config_.x_format));
  j["w_format"] = std::string(format_name(config_.w_format));
  j["y_format"] = std::string(format_name(config_.y_format));
  j["scaling"] = std::string(gemm_scaling_name(config_.scaling));
  j["accumulation"] = config_.scaling == GemmScaling::None ? "fp32" : (config_.fast_accum ? "fast" : "split");
  j["x_transposed"] = config_.x_transposed;
  j["w_transposed"] = config_.w_transposed;
  j["supported"] = supported_;
  j["status"] = status_;
  j["candidates"] = candidates_;
  j["search_accepted"] = search_found_;
  j["searched"] = searched_;
  if (supported_) j["algo"] = chosen_.to_json();
  j["search_excluded"] = search_excluded_;
  if (!search_note_.empty()) j["search_note"] = search_note_;
  j["validated"] = validated_;
  j["rejected_count"] = static_cast<int64_t>(rejected_.size());
  Json rej = Json::array();
  for (const auto& r : rejected_) {
    Json e = r.algo.to_json();
    e["reason"] = r.reason;
    rej.push_back(std::move(e));
  }
  j["rejected"] = std::move(rej);
  if (validation_) {
    Json v = Json::object();
    v["reference"] = validation_reference_.to_json();
    v["tolerance"] = validation_tolerance_.to_json();
    j["validation"] = std::move(v);
  }
  return j;
}

CublasLt::CublasLt(size_t workspace_bytes) : h_(std::make_unique<Handle>()) {
  FP8SIM_CUBLAS_CHECK(cublasLtCreate(&h_->lt));
  h_->workspace_bytes = workspace_bytes;
  if (workspace_bytes) FP8SIM_CUDA_CHECK(cudaMalloc(&h_->workspace, workspace_bytes));
}

CublasLt::~CublasLt() {
  if (h_->workspace) cudaFree(h_->workspace);
  if (h_->lt) cublasLtDestroy(h_->lt);
}

size_t CublasLt::version() { return cublasLtGetVersion(); }

std::string CublasLt::version_string() {
  const size_t v = cublasLtGetVersion();
  return fmt::format("{}.{}.{} (cudart {})", v / 10000, (v / 100) % 100, v % 100, cublasLtGetCudartVersion());
}

GemmPlan CublasLt::plan(const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args, cudaStream_t stream,
                        int max_candidates, int timing_reps, int search) {
  check_args(s, cfg, args);
  GemmPlan plan;
  plan.shape_ = s;
  plan.config_ = cfg;
  plan.impl_ = std::make_unique<GemmPlan::Impl>();
  auto& im = *plan.impl_;
  build_descriptors(im, s, cfg, args);
  const Preference pref(args, h_->workspace_bytes);
  const Heuristic heur = ask_heuristic(h_->lt, im, pref, max_candidates);
  if (heur.results.empty()) {
    plan.supported_ = false;
    plan.status_ = heur.refusal();
    return plan;
  }
  plan.candidates_ = static_cast<int>(heur.results.size());

  CandidateSelection sel(h_->lt, im, heur, args, h_->workspace, h_->workspace_bytes, stream);
  const bool validate = timing_reps > 0 && (plan.candidates_ > 1 || search > 0);
  if (validate && !sel.choose_reference(s, cfg)) {
    plan.supported_ = false;
    plan.status_ = sel.failure();
    return plan;
  }
  if (sel.time_heuristic(timing_reps) && search > 0 && timing_reps > 0) sel.search(cfg, pref, search, timing_reps);
  FP8SIM_CUDA_CHECK(cudaGetLastError());

  const SelectionRecord& rec = sel.record();
  plan.validation_ = rec.validation;
  plan.validation_reference_ = rec.validation_reference;
  plan.validation_tolerance_ = rec.validation_tolerance;
  plan.validated_ = rec.validated;
  plan.rejected_ = rec.rejected;
  plan.search_found_ = rec.search_found;
  plan.searched_ = rec.searched;
  plan.search_excluded_ = rec.search_excluded;
  plan.search_note_ = rec.search_note;
  const int pick = sel.pick();
  if (pick < 0) {
    plan.supported_ = false;
    plan.status_ = sel.failure();
    return plan;
  }
  const Timed& chosen = sel.finalist(pick);
  im.algo = chosen.algo;
  im.have_algo = true;
  plan.supported_ = true;
  plan.status_ = "ok";
  plan.chosen_ = info_of(im.algo);
  plan.chosen_.from_search = pick > 0;
  plan.chosen_.workspace = chosen.workspace;
  plan.chosen_.median_ms = chosen.ms;
  return plan;
}

std::vector<GemmCandidate> CublasLt::enumerate(const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args,
                                               int max_candidates, std::string* search_note) {
  check_args(s, cfg, args);
  GemmPlan::Impl im;
  build_descriptors(im, s, cfg, args);
  const Preference pref(args, h_->workspace_bytes);
  const Heuristic heur = ask_heuristic(h_->lt, im, pref, max_candidates);
  std::vector<GemmCandidate> out;
  if (heur.results.empty()) return out;
  auto add = [&](const cublasLtMatmulAlgo_t& algo, size_t workspace, int rank, std::string excluded) {
    GemmCandidate c;
    c.info = info_of(algo);
    c.info.from_search = rank < 0;
    c.info.workspace = workspace;
    c.heuristic_rank = rank;
    c.excluded = std::move(excluded);
    std::memcpy(c.algo.data(), &algo, sizeof algo);
    out.push_back(std::move(c));
  };
  for (size_t i = 0; i < heur.results.size(); ++i) {
    const auto& r = heur.results[i];
    if (r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= h_->workspace_bytes)
      add(r.algo, r.workspaceSize, static_cast<int>(i), {});
  }
  SearchLimits lim;
  lim.keep_excluded = true;
  SearchStats stats;
  std::vector<SearchConfig> found = enumerate_search(h_->lt, im, cfg, heur, pref.al, h_->workspace_bytes, lim, stats);
  if (search_note) *search_note = stats.note(found.size());
  for (auto& f : found) add(f.algo, f.workspace, -1, std::move(f.excluded));
  return out;
}

GemmPlan CublasLt::plan_for(const GemmShape& s, const GemmConfig& cfg, const GemmArgs& args,
                            const GemmCandidate& candidate) {
  check_args(s, cfg, args);
  GemmPlan plan;
  plan.shape_ = s;
  plan.config_ = cfg;
  plan.impl_ = std::make_unique<GemmPlan::Impl>();
  auto& im = *plan.impl_;
  build_descriptors(im, s, cfg, args);
  std::memcpy(&im.algo, candidate.algo.data(), sizeof im.algo);
  cublasLtMatmulHeuristicResult_t chk{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(h_->lt, im.desc, im.a, im.b, im.c, im.d, &im.algo, &chk);
  if (st != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > h_->workspace_bytes) {
    plan.supported_ = false;
    plan.status_ = st != CUBLAS_STATUS_SUCCESS ? fmt::format("cublasLtMatmulAlgoCheck: {}", cublasLtGetStatusName(st))
                                               : fmt::format("workspace of {} bytes needed, {} available",
                                                             chk.workspaceSize, h_->workspace_bytes);
    return plan;
  }
  im.have_algo = true;
  plan.supported_ = true;
  plan.status_ = "ok";
  plan.candidates_ = 1;
  plan.chosen_ = info_of(im.algo);
  plan.chosen_.from_search = candidate.info.from_search;
  plan.chosen_.workspace = chk.workspaceSize;
  return plan;
}

void CublasLt::run(const GemmPlan& plan, const GemmArgs& args, cudaStream_t stream) {
  FP8SIM_REQUIRE(plan.supported() && plan.impl_ && plan.impl_->have_algo, "GEMM plan is not runnable: {}",
                 plan.status());
  auto& im = *plan.impl_;
  if (plan.config().scaling != GemmScaling::None) {
    if (args.w_scale != im.a_scale) {
      im.a_scale = args.w_scale;
      set_desc(im.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(im.a_scale));
    }
    if (args.x_scale != im.b_scale) {
      im.b_scale = args.x_scale;
      set_desc(im.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(im.b_scale));
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  FP8SIM_CUBLAS_CHECK(cublasLtMatmul(h_->lt, im.desc, &alpha, args.w, im.a, args.x, im.b, &beta, args.y, im.c, args.y,
                                     im.d, &im.algo, h_->workspace, h_->workspace_bytes, stream));
}

std::vector<float> vec128_scales_for_cublas(const float* x_scales, int64_t m, int64_t k_blocks) {
  std::vector<float> out(static_cast<size_t>(m * k_blocks));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t kb = 0; kb < k_blocks; ++kb) out[static_cast<size_t>(r + kb * m)] = x_scales[r * k_blocks + kb];
  return out;
}

std::vector<float> blk128_scales_for_cublas(const float* w_scales, int64_t n_blocks, int64_t k_blocks) {
  const int64_t ld = (k_blocks + 3) / 4 * 4;
  std::vector<float> out(static_cast<size_t>(ld * n_blocks), 0.0f);
  for (int64_t nb = 0; nb < n_blocks; ++nb)
    for (int64_t kb = 0; kb < k_blocks; ++kb) out[static_cast<size_t>(kb + nb * ld)] = w_scales[nb * k_blocks + kb];
  return out;
}

}  // namespace fp8sim::gpu
