// sample.metal: seeded sampling on the GPU, bit for bit engine/sample's procedure
// (sample.Sampler.Next with Temperature > 0; greedy decoding is argmax.metal):
//
//   (1) logit bias, (2) repetition penalty, (3) frequency/presence penalties    sample_penalties
//   (5) temperature, (6) top-k, (7) top-p, (8) min-p, (9) inverse-CDF draw     sample_select,
//       with u = splitmix64(seed + step·φ) / 2^53, step = step.pos - pos0       sample_final
//
// Bit-exactness. engine/sample computes in float32 with float64 exp, sorts the candidates by
// probability (ties: lower id first) and sums them in float64. Every value that decides the
// choice is therefore computed here with integers (soft float), which Metal's fast-math mode
// cannot reassociate, flush or approximate:
//   - x ± y, x·y, x/y in float32, correctly rounded (ties to even), subnormals and infinities;
//   - p = float32(exp(float64(y))) for y <= 0 as the correctly rounded float32 exp (64-bit fixed
//     point: log2(e) to 127 bits, a 64-entry 2^(-j/64) table and a degree-7 polynomial, error
//     below 2^-59); it could differ from float32(math.Exp) only where that float64 exp lands on
//     the wrong side of a float32 rounding boundary: TestSampleExpExhaustive finds no such input
//     among all 2^31 + 1 float32 y <= 0 (amd64's math.Exp);
//   - float64 sums and products of non-negative values, correctly rounded;
//   - splitmix64 in 64-bit integers.
//
// The candidates. engine/sample keeps the top-k logits (ties: lower id) when 0 < top_k < n,
// else every logit but -inf. Here both are "the k_eff largest keys", key = (logit as an ordered
// integer, ~id), k_eff = min(top_k or n, SAMPLE_MAX_K): -inf logits get p = 0, which changes
// nothing. Only candidates with p >= 2^-53 can matter: the best candidate has p = 1, so every
// running float64 sum is >= 1 and adding less than half its ulp leaves it unchanged; as the
// draw u = U·total < total (U <= 1 - 2^-53), the fallback "last candidate" of engine/sample is
// never reached. So when more than SAMPLE_MAX_K candidates exist (top_k = 0 or > 1024), the
// result is still exact if the SAMPLE_MAX_K-th best has p < 2^-53; otherwise sample_final sets
// bit 0 of the status word and the host must redo the step on the CPU (sample.Sampler.Next on
// the same logits) before the token is used. With 0 < top_k <= 1024 this cannot happen; with
// top_k = 0 it does when more than 1024 tokens have p >= 2^-53 (flat or hot distributions).
//
// The penalties. sample_penalties applies, per id, x += bias; x = x > 0 ? x / rep : x · rep on
// seen ids; x -= pen[count] on counted ids (engine/sample's order, float32, soft float). pen is
// the host's table of frequency·c + presence (kernels.PenaltyTable), computed with engine/sample's
// own expression so that it rounds as this build of Go does (Go fuses that multiply-add on arm64).
// The token state (count | seen << 31) is kept on the GPU: sample_final and argmax_final record
// each chosen token; the host marks the prompt's ids seen.
//
// Dispatches (one decode step; the grid is fixed, everything else comes from buffers):
//   sample_penalties  dispatchThreads(n), SamplePenaltyThreads (256) per group. Reads the
//                     logits, writes the adjusted logits (may alias the input).
//   sample_select     SampleGroups(n, CHUNK) threadgroups (61 for 248320 ids, CHUNK 4096) of
//                     SampleThreads (1024; any multiple of 32): threadgroup g radix-selects the
//                     top min(k_eff, CHUNK) keys of ids [g·CHUNK, (g+1)·CHUNK).
//   sample_final      1 threadgroup of SampleThreads: radix-selects the top k_eff of those,
//                     computes their p, sorts by (p, -id) (bitonic, threadgroup memory), runs the
//                     float64 top-p / min-p / draw in one thread, writes step = {pos+1, token},
//                     records the token for the penalties and sets the status word.
// sample_probe is a test hook for the soft-float operations; the decode step does not use it.
//
// Logprobs (requests that ask for them; engine/sample's step 4, the log-softmax of the penalised
// logits): logprob_partial and logprob_final report the chosen token's logprob and the
// LOGPROB_TOPN (20) most likely tokens with theirs, so the host reads 168 bytes a step instead of
// the logits. The ids and their order are engine/sample's exactly (keys as above: the penalised
// logits are the same bits); logZ = max + log(Σ exp(x - max)) is summed in float32 here (float64
// in engine/sample), so the values agree to about 1e-6 of their magnitude, not bit for bit.
//   logprob_partial   SampleGroups(n, CHUNK) threadgroups of LogprobThreads (256; any multiple
//                     of 32): per chunk its max m, Σ exp(x - m) and its LOGPROB_TOPN largest keys.
//   logprob_final     1 threadgroup of LogprobThreads, after the selection wrote step: merges
//                     them and writes {logprob of step's token, token, LOGPROB_TOPN × (id, logprob)}.
//
// Rows (the multi-row decode step: R sequences, each its own logits and sampler): every kernel
// here takes the row r on the grid — the second dimension of sample_penalties' threads and of
// sample_select's and logprob_partial's threadgroups, sample_final's and logprob_final's only
// one — and reads and writes row r of each buffer: logits, the penalised logits, the token
// states and the bias [R][n] (rows n apart), params [R] SampleParams (its own settings, seed,
// pos0 and pen_len), pen [R][SAMPLE_PEN_STRIDE] (function constant 3: one stride for all rows,
// >= every row's pen_len; unset, as one-row dispatches leave it: 0), cand
// [R][groups·min(SAMPLE_MAX_K, CHUNK)] (the one-row length, kernels.SampleCandLen), step
// [R]{pos, token}, status [R] words, ms [R][groups], top [R][groups][LOGPROB_TOPN] and the
// logprob record [R][2 + 2·LOGPROB_TOPN]. A threadgroup's operations do not depend on r or on
// the other rows, so each row is bit-identical to a one-row dispatch on it; R = 1 is today's
// dispatch.
#include <metal_stdlib>
using namespace metal;

constant uint SAMPLE_N [[function_constant(0)]];      // ids that may be chosen (vocab limit)
constant uint SAMPLE_CHUNK [[function_constant(1)]];  // ids per sample_select threadgroup (4096)
// pen's row stride in floats (multi-row sample_penalties; unset: 0, one row, which starts at 0)
constant uint SAMPLE_PEN_STRIDE_FC [[function_constant(3)]];
constant uint SAMPLE_PEN_STRIDE = is_function_constant_defined(SAMPLE_PEN_STRIDE_FC) ? SAMPLE_PEN_STRIDE_FC : 0u;

#define SAMPLE_MAX_K 1024

// SampleParams (buffer 1 of the sampler kernels, a row's; [R] of them for R rows): all words,
// floats as their bits.
struct SampleParams {
  uint temperature;  // float, > 0
  uint top_k;        // 0 = off
  uint top_p;        // float; off unless 0 < top_p < 1
  uint min_p;        // float; off unless > 0
  uint repetition;   // float; used when flags & SAMPLE_SEEN
  uint flags;        // SAMPLE_BIAS | SAMPLE_COUNT | SAMPLE_SEEN
  uint seed_lo, seed_hi;
  uint pos0;     // step.pos of the sampler's step 0
  uint pen_len;  // entries of the penalty table
  uint pad[6];
};
#define SAMPLE_BIAS 1u   // add bias[id]
#define SAMPLE_COUNT 2u  // subtract pen[count[id]] where count > 0; count chosen tokens
#define SAMPLE_SEEN 4u   // repetition penalty on seen ids; mark chosen tokens seen

// ---- float32, correctly rounded, in integers ------------------------------------------------

#define F32_NAN 0x7fc00000u
#define F32_INF 0x7f800000u

inline uint clz64(ulong x) {
  const uint hi = uint(x >> 32);
  return hi != 0 ? clz(hi) : 32 + clz(uint(x));
}

// f32_unpack: the significand with its leading 1 at bit 23 and the biased exponent (<= 0 for a
// subnormal, which is normalised). a must be finite and non-zero.
inline int f32_unpack(uint a, thread uint& m) {
  const uint e = (a >> 23) & 0xffu;
  m = a & 0x7fffffu;
  if (e != 0) {
    m |= 0x800000u;
    return int(e);
  }
  const int lz = int(clz(m)) - 8;
  m <<= lz;
  return 1 - lz;
}

// f32_round: sign | the value m·2^(E-127-lead) rounded to float32 (ties to even), where bit lead
// (23..63) is m's leading 1 and sticky says that non-zero bits follow m.
inline uint f32_round(uint sign, int E, ulong m, int lead, bool sticky) {
  int sh = lead - 23;
  if (E < 1) {
    sh += 1 - E;
    E = 1;
  }
  ulong mant = m;
  if (sh >= 64) {
    const ulong top = 1ul << 63;
    return sign | ((sh == 64 && (m > top || (m == top && sticky))) ? 1u : 0u);
  }
  if (sh > 0) {
    mant = m >> sh;
    const ulong rem = m & ((1ul << sh) - 1);
    const ulong tie = 1ul << (sh - 1);
    if (rem > tie || (rem == tie && (sticky || (mant & 1) != 0))) {
      mant++;
    }
  }
  if ((mant >> 24) != 0) {
    mant >>= 1;
    E++;
  }
  if (E >= 255) {
    return sign | F32_INF;
  }
  return sign | ((mant >> 23) != 0 ? uint(E) << 23 : 0u) | uint(mant & 0x7fffffu);
}

inline uint f32_add(uint a, uint b) {
  uint aa = a & 0x7fffffffu, ab = b & 0x7fffffffu;
  if (aa > F32_INF || ab > F32_INF) {
    return F32_NAN;
  }
  if (aa == F32_INF || ab == F32_INF) {
    if (aa == ab && a != b) {
      return F32_NAN;  // inf - inf
    }
    return aa == F32_INF ? a : b;
  }
  if (aa < ab) {  // |a| >= |b|
    const uint t = a;
    a = b;
    b = t;
    aa = a & 0x7fffffffu;
    ab = b & 0x7fffffffu;
  }
  if (ab == 0) {
    return aa == 0 ? (a & b) : a;  // -0 only for -0 + -0
  }
  uint ma, mb;
  const int ea = f32_unpack(a, ma), eb = f32_unpack(b, mb);
  const ulong A = ulong(ma) << 32;
  ulong B = ulong(mb) << 32;
  const uint d = uint(ea - eb);
  if (d >= 64) {
    B = 1;  // only the sticky bit survives
  } else if (d > 0) {
    B = (B >> d) | ((B & ((1ul << d) - 1)) != 0 ? 1ul : 0ul);
  }
  const ulong R = ((a ^ b) >> 31) != 0 ? A - B : A + B;
  if (R == 0) {
    return 0;  // x + (-x) = +0
  }
  const int lead = 63 - int(clz64(R));
  return f32_round(a & 0x80000000u, ea + lead - 55, R, lead, false);
}

inline uint f32_mul(uint a, uint b) {
  const uint sign = (a ^ b) & 0x80000000u;
  const uint aa = a & 0x7fffffffu, ab = b & 0x7fffffffu;
  if (aa > F32_INF || ab > F32_INF) {
    return F32_NAN;
  }
  if (aa == F32_INF || ab == F32_INF) {
    return (aa == 0 || ab == 0) ? F32_NAN : sign | F32_INF;
  }
  if (aa == 0 || ab == 0) {
    return sign;
  }
  uint ma, mb;
  const int ea = f32_unpack(a, ma), eb = f32_unpack(b, mb);
  const ulong P = ulong(ma) * ulong(mb);
  const int lead = 63 - int(clz64(P));
  return f32_round(sign, ea + eb - 127 + (lead - 46), P, lead, false);
}

inline uint f32_div(uint a, uint b) {
  const uint sign = (a ^ b) & 0x80000000u;
  const uint aa = a & 0x7fffffffu, ab = b & 0x7fffffffu;
  if (aa > F32_INF || ab > F32_INF) {
    return F32_NAN;
  }
  if (aa == F32_INF) {
    return ab == F32_INF ? F32_NAN : sign | F32_INF;
  }
  if (ab == F32_INF) {
    return sign;
  }
  if (ab == 0) {
    return aa == 0 ? F32_NAN : sign | F32_INF;
  }
  if (aa == 0) {
    return sign;
  }
  uint ma, mb;
  const int ea = f32_unpack(a, ma), eb = f32_unpack(b, mb);
  const ulong N = ulong(ma) << 40;
  const ulong Q = N / ulong(mb);
  const bool sticky = N - Q * ulong(mb) != 0;
  const int lead = 63 - int(clz64(Q));
  return f32_round(sign, ea - eb + 127 + (lead - 40), Q, lead, sticky);
}

// ---- exp ------------------------------------------------------------------------------------

// 64x64 -> 128-bit product: returns the high word, lo the low one.
inline ulong mul128(ulong a, ulong b, thread ulong& lo) {
  const ulong a0 = a & 0xfffffffful, a1 = a >> 32, b0 = b & 0xfffffffful, b1 = b >> 32;
  const ulong p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const ulong mid = (p00 >> 32) + (p01 & 0xfffffffful) + (p10 & 0xfffffffful);
  lo = (mid << 32) | (p00 & 0xfffffffful);
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

// (a·b) >> 63 for Q.63 fixed-point values a, b <= 1.
inline ulong mul_q63(ulong a, ulong b) {
  ulong lo;
  const ulong hi = mul128(a, b, lo);
  return (hi << 1) | (lo >> 63);
}

// 2^(-j/64) in Q.63, rounded to nearest.
constant ulong SAMPLE_EXP2_TABLE[64] = {
    0x8000000000000000ul, 0x7e9f06067a4360baul, 0x7d41d96db915019dul, 0x7be86fb985689ddcul,
    0x7a92be8a92436616ul, 0x7940bb9e2cffd89dul, 0x77f25ccdee6d7ae6ul, 0x76a7980f6cca15c2ul,
    0x75606373ee921c97ul, 0x741cb5281e25ee34ul, 0x72dc8373be41a454ul, 0x719fc4b95f452d29ul,
    0x70666f76154a7089ul, 0x6f307a412f074892ul, 0x6dfddbcbed791babul, 0x6cce8ae13c57ebdbul,
    0x6ba27e656b4eb57aul, 0x6a79ad55e7f6fd10ul, 0x69540ec8f895722dul, 0x683199ed779592caul,
    0x6712460a8fc24072ul, 0x65f60a7f79393e2eul, 0x64dcdec3371793d1ul, 0x63c6ba6455dcd8aeul,
    0x62b39508aa836d6ful, 0x61a3666d124bb204ul, 0x6096266533384a2bul, 0x5f8bccdb3d398841ul,
    0x5e8451cfac061b5ful, 0x5d7fad59099f22feul, 0x5c7dd7a3b17dcf75ul, 0x5b7ec8f19468bbc9ul,
    0x5a827999fcef3242ul, 0x5988e20954889245ul, 0x5891fac0e95612c8ul, 0x579dbc56b48521baul,
    0x56ac1f752150a563ul, 0x55bd1cdad49f699cul, 0x54d0ad5a753e077cul, 0x53e6c9da74b29ab5ul,
    0x52ff6b54d8a89c75ul, 0x521a8ad704f3404ful, 0x513821818624b40cul, 0x50582887dcb8a7e1ul,
    0x4f7a993048d088d7ul, 0x4e9f6cd3967fdba8ul, 0x4dc69cdceaa72a9cul, 0x4cf022c9905bfd32ul,
    0x4c1bf828c6dc54b8ul, 0x4b4a169b900c2d00ul, 0x4a7a77d47f7b84b1ul, 0x49ad159789f37496ul,
    0x48e1e9b9d588e19bul, 0x4818ee218a3358eeul, 0x47521cc5a2e6a9e0ul, 0x468d6fadbf2dd4f3ul,
    0x45cae0f1f545eb73ul, 0x450a6abaa4b77ecdul, 0x444c0740496d4294ul, 0x438fb0cb4f468808ul,
    0x42d561b3e6243d8aul, 0x421d1461d66f2023ul, 0x4166c34c5615d0ecul, 0x40b268f9de0183baul,
};
#define SAMPLE_LOG2E_HI 0x5c551d94ae0bf85dul  // log2(e)·2^126, 127 bits
#define SAMPLE_LOG2E_LO 0xdf43ff68348e9f44ul
#define SAMPLE_LN2_Q64 0xb17217f7d1cf79acul  // ln(2)·2^64

// f32_exp: exp(y) correctly rounded to float32, for y <= 0 (bits); NaN for y > 0 or NaN.
inline uint f32_exp(uint y) {
  const uint ay = y & 0x7fffffffu;
  if (ay > F32_INF || ((y >> 31) == 0 && ay != 0)) {
    return F32_NAN;
  }
  if (ay <= 0x33000000u) {
    return 0x3f800000u;  // |y| <= 2^-25: exp(y) rounds to 1
  }
  if (ay >= 0x43000000u) {
    return 0;  // |y| >= 128 (and -inf): below half the smallest subnormal
  }
  // |y|·2^56, exact: |y| >= 2^-24 has no bits below 2^-47, and |y| < 128.
  const uint e = ay >> 23;
  const ulong Y = ulong((ay & 0x7fffffu) | 0x800000u) << (e - 94);
  // t = |y|·log2(e) = k + f: T = Y·L = t·2^182; k = bits 182 and up, f = bits 118..181 (Q.64).
  ulong lo1, lo0;
  const ulong hi1 = mul128(Y, SAMPLE_LOG2E_HI, lo1);
  const ulong hi0 = mul128(Y, SAMPLE_LOG2E_LO, lo0);
  const ulong mid = lo1 + hi0;
  const ulong top = hi1 + (mid < lo1 ? 1ul : 0ul);
  const uint k = uint(top >> 54);
  const ulong f = (top << 10) | (mid >> 54);
  // 2^-f = 2^(-j/64) · exp(-r·ln2), j the top 6 bits of f, r·ln2 < ln(2)/64.
  const uint j = uint(f >> 58);
  ulong lo;
  const ulong z = mul128(f & ((1ul << 58) - 1), SAMPLE_LN2_Q64, lo) >> 1;  // r·ln2 in Q.63
  const ulong one = 1ul << 63;
  ulong p = one - z / 7;  // exp(-z) = 1 - z(1 - z/2(1 - z/3(... (1 - z/7))))
  p = one - mul_q63(z / 6, p);
  p = one - mul_q63(z / 5, p);
  p = one - mul_q63(z / 4, p);
  p = one - mul_q63(z / 3, p);
  p = one - mul_q63(z / 2, p);
  p = one - mul_q63(z, p);
  const ulong R = mul_q63(SAMPLE_EXP2_TABLE[j], p);  // 2^-f in (1/2, 1], Q.63
  const int lead = 63 - int(clz64(R));
  return f32_round(0, 127 + lead - 63 - int(k), R, lead, false);
}

// ---- float64, non-negative operands, correctly rounded ---------------------------------------

#define F64_MANT 0xffffffffffffful

inline ulong f32_to_f64(uint a) {
  if ((a & 0x7fffffffu) == 0 || (a & F32_INF) == F32_INF) {  // zeros, infinities, NaNs
    return (ulong(a & 0x80000000u) << 32) | (ulong(a & 0x7fffffffu) == 0 ? 0ul : 0x7ff0000000000000ul) |
           (ulong(a & 0x7fffffu) << 29);
  }
  uint m;
  const int e = f32_unpack(a, m);
  return (ulong(a >> 31) << 63) | (ulong(e - 127 + 1023) << 52) | (ulong(m & 0x7fffffu) << 29);
}

inline int f64_unpack(ulong a, thread ulong& m) {
  const int e = int((a >> 52) & 0x7ff);
  m = a & F64_MANT;
  if (e != 0) {
    m |= 1ul << 52;
    return e;
  }
  const int lz = int(clz64(m)) - 11;
  m <<= lz;
  return 1 - lz;
}

inline ulong f64_round(int E, ulong m, int lead, bool sticky) {
  int sh = lead - 52;
  if (E < 1) {
    sh += 1 - E;
    E = 1;
  }
  ulong mant = m;
  if (sh >= 64) {
    const ulong top = 1ul << 63;
    return (sh == 64 && (m > top || (m == top && sticky))) ? 1ul : 0ul;
  }
  if (sh > 0) {
    mant = m >> sh;
    const ulong rem = m & ((1ul << sh) - 1);
    const ulong tie = 1ul << (sh - 1);
    if (rem > tie || (rem == tie && (sticky || (mant & 1) != 0))) {
      mant++;
    }
  }
  if ((mant >> 53) != 0) {
    mant >>= 1;
    E++;
  }
  if (E >= 2047) {
    return 0x7ff0000000000000ul;
  }
  return ((mant >> 52) != 0 ? ulong(E) << 52 : 0ul) | (mant & F64_MANT);
}

// a + b for finite a, b >= 0 (float64 bits).
inline ulong f64_add(ulong a, ulong b) {
  if (a < b) {
    const ulong t = a;
    a = b;
    b = t;
  }
  if (b == 0) {
    return a;
  }
  ulong ma, mb;
  const int ea = f64_unpack(a, ma), eb = f64_unpack(b, mb);
  const ulong A = ma << 8;
  ulong B = mb << 8;
  const uint d = uint(ea - eb);
  if (d >= 64) {
    B = 1;
  } else if (d > 0) {
    B = (B >> d) | ((B & ((1ul << d) - 1)) != 0 ? 1ul : 0ul);
  }
  const ulong R = A + B;
  const int lead = 63 - int(clz64(R));
  return f64_round(ea + lead - 60, R, lead, false);
}

// a·b for finite a, b >= 0 (float64 bits).
inline ulong f64_mul(ulong a, ulong b) {
  if (a == 0 || b == 0) {
    return 0;
  }
  ulong ma, mb;
  const int ea = f64_unpack(a, ma), eb = f64_unpack(b, mb);
  ulong lo;
  const ulong hi = mul128(ma, mb, lo);  // leading 1 at bit 104 or 105
  const ulong m = (hi << 22) | (lo >> 42);
  const bool sticky = (lo & ((1ul << 42) - 1)) != 0;
  const int lead = 63 - int(clz64(m));
  return f64_round(ea + eb - 1023 + (lead - 62), m, lead, sticky);
}

// The sampler's uniform for a step: splitmix64(seed + step·φ) >> 11, times 2^-53, as float64 bits.
inline ulong sample_uniform(ulong seed, ulong step) {
  ulong z = seed + step * 0x9e3779b97f4a7c15ul;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
  z ^= z >> 31;
  const ulong n = z >> 11;
  if (n == 0) {
    return 0;
  }
  const int lead = 63 - int(clz64(n));
  return (ulong(1023 + lead - 53) << 52) | ((n << (52 - lead)) & F64_MANT);
}

// ---- keys -----------------------------------------------------------------------------------

// sample_key orders logits, largest first, ties to the lower id: (the float as an ordered
// integer) << 32 | ~id. -0 counts as +0 (they compare equal in Go); NaN sorts below everything.
inline ulong sample_key(float v, uint id) {
  uint b = as_type<uint>(v);
  if (b == 0x80000000u) {
    b = 0;
  }
  uint k;
  if ((b & 0x7fffffffu) > F32_INF) {
    k = 0;
  } else {
    k = (b >> 31) != 0 ? ~b : (b | 0x80000000u);
  }
  return (ulong(k) << 32) | ulong(0xffffffffu - id);
}

inline uint sample_key_bits(ulong key) {  // the logit's bits back from a key
  const uint k = uint(key >> 32);
  return (k >> 31) != 0 ? (k & 0x7fffffffu) : ~k;
}

inline uint sample_key_id(ulong key) { return 0xffffffffu - uint(key); }

// The keys of a row of sample_select's output (kernels.SampleCandLen): a group's slots are
// min(k_eff, CHUNK) <= min(SAMPLE_MAX_K, CHUNK), so any top_k fits.
inline ulong sample_cand_len() {
  return ulong((SAMPLE_N + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK) * min(uint(SAMPLE_MAX_K), SAMPLE_CHUNK);
}

// The number of candidates: top_k when 0 < top_k < n (engine/sample's top-k path), else all n,
// at most SAMPLE_MAX_K.
inline uint sample_k_eff(constant SampleParams& p) {
  const uint k = (p.top_k > 0 && p.top_k < SAMPLE_N) ? p.top_k : SAMPLE_N;
  return min(k, uint(SAMPLE_MAX_K));
}

// sample_radix_select returns the threshold T such that exactly want of the len (unique) keys
// are >= T: 8 passes of 8 bits at most, stopping once the boundary bin is taken whole. Keys come
// from logits (ids base..base+len-1) or from cand[0..len). All threads of the threadgroup call it.
template <bool LOGITS>
inline ulong sample_radix_select(device const float* logits, device const ulong* cand, uint base, uint len,
                                 uint want, threadgroup atomic_uint* hist, threadgroup uint* shared, uint tid,
                                 uint ntg, uint lane, uint sg) {
  ulong prefix = 0, mask = 0;
  uint need = want;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (uint b = tid; b < 256; b += ntg) {
      atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < len; i += ntg) {
      const ulong key = LOGITS ? sample_key(logits[base + i], base + i) : cand[i];
      if ((key & mask) == prefix) {
        atomic_fetch_add_explicit(&hist[uint(key >> shift) & 0xffu], 1u, memory_order_relaxed);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {  // lane l scans bins 255-8l down to 248-8l
      uint c[8];
      uint local = 0;
      for (uint j = 0; j < 8; j++) {
        c[j] = atomic_load_explicit(&hist[255 - 8 * lane - j], memory_order_relaxed);
        local += c[j];
      }
      uint above = simd_prefix_exclusive_sum(local);
      for (uint j = 0; j < 8; j++) {
        if (above < need && above + c[j] >= need) {
          shared[0] = 255 - 8 * lane - j;
          shared[1] = above;
          shared[2] = c[j];
        }
        above += c[j];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint bin = shared[0], above = shared[1], in_bin = shared[2];
    need -= above;
    prefix |= ulong(bin) << shift;
    mask |= 0xfful << shift;
    if (in_bin == need) {
      break;  // the same for every thread: all of the bin is taken
    }
  }
  return prefix;
}

// ---- kernels --------------------------------------------------------------------------------

kernel void sample_penalties(device const float* logits_rows [[buffer(0)]],  // [R][n] ([>= n] for one)
                             constant SampleParams* params [[buffer(1)]],     // [R]
                             device const uint* states [[buffer(2)]],         // [R][n] count | seen<<31
                             device const float* biases [[buffer(3)]],        // [R][n] (SAMPLE_BIAS)
                             device const float* pens [[buffer(4)]],          // [R][PEN_STRIDE] (SAMPLE_COUNT)
                             device float* outs [[buffer(5)]],                // [R][n], may alias logits
                             uint2 gid [[thread_position_in_grid]]) {         // (id, row)
  const uint i = gid.x;
  if (i >= SAMPLE_N) {
    return;
  }
  // This row's sequence: everything below is the one-row kernel on these.
  const ulong row = gid.y;
  constant SampleParams& p = params[gid.y];
  device const float* logits = logits_rows + row * SAMPLE_N;
  device const uint* state = states + row * SAMPLE_N;
  device const float* bias = biases + row * SAMPLE_N;
  device const float* pen = pens + row * SAMPLE_PEN_STRIDE;
  device float* out = outs + row * SAMPLE_N;
  uint x = as_type<uint>(logits[i]);
  if ((p.flags & SAMPLE_BIAS) != 0) {
    const uint b = as_type<uint>(bias[i]);
    if ((b & 0x7fffffffu) != 0) {
      x = f32_add(x, b);
    }
  }
  const uint s = (p.flags & (SAMPLE_SEEN | SAMPLE_COUNT)) != 0 ? state[i] : 0u;
  if ((p.flags & SAMPLE_SEEN) != 0 && (s >> 31) != 0) {
    const bool positive = (x >> 31) == 0 && x != 0;  // x > 0 (NaN stays NaN either way)
    x = positive ? f32_div(x, p.repetition) : f32_mul(x, p.repetition);
  }
  const uint c = s & 0x7fffffffu;
  if ((p.flags & SAMPLE_COUNT) != 0 && c != 0) {
    x = f32_add(x, as_type<uint>(pen[min(c, p.pen_len - 1)]) ^ 0x80000000u);
  }
  out[i] = as_type<float>(x);
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void sample_select(device const float* logits_rows [[buffer(0)]],  // [R][n] penalised ([>= n] for one)
                          constant SampleParams* params [[buffer(1)]],     // [R]
                          device ulong* cand_rows [[buffer(2)]],  // [R][cand_len]: [groups][min(k_eff, CHUNK)]
                          uint2 tg [[threadgroup_position_in_grid]],  // (group, row)
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup atomic_uint hist[256];
  threadgroup uint shared[4];
  threadgroup atomic_uint slots;

  // This row's sequence: everything below is the one-row kernel on these.
  const uint g = tg.x;
  constant SampleParams& p = params[tg.y];
  device const float* logits = logits_rows + ulong(tg.y) * SAMPLE_N;
  device ulong* cand = cand_rows + ulong(tg.y) * sample_cand_len();
  const uint k_eff = sample_k_eff(p);
  const uint kk = min(k_eff, SAMPLE_CHUNK);  // slots per group
  const uint base = g * SAMPLE_CHUNK;
  if (base >= SAMPLE_N) {
    return;
  }
  const uint len = min(SAMPLE_CHUNK, SAMPLE_N - base);
  const uint want = min(kk, len);
  if (tid == 0) {
    atomic_store_explicit(&slots, 0u, memory_order_relaxed);
  }
  const ulong T = sample_radix_select<true>(logits, cand, base, len, want, hist, shared, tid, ntg, lane, sg);
  device ulong* out = cand + ulong(g) * kk;
  for (uint i = tid; i < len; i += ntg) {
    const ulong key = sample_key(logits[base + i], base + i);
    if (key >= T) {
      out[atomic_fetch_add_explicit(&slots, 1u, memory_order_relaxed)] = key;
    }
  }
  for (uint s = want + tid; s < kk; s += ntg) {
    out[s] = 0;  // below every real key
  }
}

[[max_total_threads_per_threadgroup(1024)]]
kernel void sample_final(constant SampleParams* params [[buffer(1)]],  // [R]
                         device const ulong* cand_rows [[buffer(2)]],  // [R][cand_len] sample_select's output
                         device uint* steps [[buffer(3)]],   // [R]{pos, token}: -> {pos+1, chosen}
                         device uint* states [[buffer(4)]],  // [R][n] count | seen<<31
                         device uint* statuses [[buffer(5)]],  // [R] bit 0: redo this step on the CPU
                         uint row [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint ntg [[threads_per_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup atomic_uint hist[256];
  threadgroup uint shared[4];
  threadgroup atomic_uint slots;
  threadgroup atomic_uint top;
  threadgroup ulong keys[SAMPLE_MAX_K];

  // This row's sequence: everything below is the one-row kernel on these.
  constant SampleParams& p = params[row];
  device const ulong* cand = cand_rows + ulong(row) * sample_cand_len();
  device uint* step = steps + 2 * row;
  device uint* state = states + ulong(row) * SAMPLE_N;
  device uint* status = statuses + row;
  const uint k_eff = sample_k_eff(p);
  const uint kk = min(k_eff, SAMPLE_CHUNK);
  const uint groups = (SAMPLE_N + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
  const uint len = groups * kk;
  if (tid == 0) {
    atomic_store_explicit(&slots, 0u, memory_order_relaxed);
    atomic_store_explicit(&top, 0u, memory_order_relaxed);
  }
  const ulong T = sample_radix_select<false>(nullptr, cand, 0, len, k_eff, hist, shared, tid, ntg, lane, sg);
  for (uint i = tid; i < len; i += ntg) {
    const ulong key = cand[i];
    if (key >= T) {
      keys[atomic_fetch_add_explicit(&slots, 1u, memory_order_relaxed)] = key;
      atomic_fetch_max_explicit(&top, uint(key >> 32), memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // p = exp((x - m) / T) for each candidate; sort keys become (p, ~id).
  uint size = 1;
  while (size < k_eff) {
    size <<= 1;
  }
  const uint neg_m = sample_key_bits(ulong(atomic_load_explicit(&top, memory_order_relaxed)) << 32) ^ 0x80000000u;
  for (uint i = tid; i < size; i += ntg) {
    if (i < k_eff) {
      const ulong key = keys[i];
      const uint pr = f32_exp(f32_div(f32_add(sample_key_bits(key), neg_m), p.temperature));
      keys[i] = (ulong(pr) << 32) | (key & 0xfffffffful);
    } else {
      keys[i] = 0;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint k = 2; k <= size; k <<= 1) {  // bitonic sort, descending
    for (uint j = k >> 1; j > 0; j >>= 1) {
      for (uint i = tid; i < size; i += ntg) {
        const uint ixj = i ^ j;
        if (ixj > i) {
          const ulong a = keys[i], b = keys[ixj];
          if ((i & k) == 0 ? a < b : a > b) {
            keys[i] = b;
            keys[ixj] = a;
          }
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  if (tid != 0) {
    return;
  }

  // engine/sample's draw over keys[0..k_eff), in float64.
  uint cnt = k_eff;
  ulong total = 0;
  for (uint j = 0; j < cnt; j++) {
    total = f64_add(total, f32_to_f64(uint(keys[j] >> 32)));
  }
  if (p.top_p != 0 && (p.top_p >> 31) == 0 && p.top_p < 0x3f800000u) {  // 0 < top_p < 1
    const ulong limit = f64_mul(f32_to_f64(p.top_p), total);
    ulong cum = 0;
    for (uint j = 0; j < cnt; j++) {
      cum = f64_add(cum, f32_to_f64(uint(keys[j] >> 32)));
      if (cum >= limit) {
        cnt = j + 1;
        break;
      }
    }
  }
  if (p.min_p != 0 && p.min_p <= F32_INF) {  // min_p > 0
    const uint limit = f32_mul(p.min_p, uint(keys[0] >> 32));
    uint j = cnt;
    while (j > 1 && uint(keys[j - 1] >> 32) < limit) {
      j--;
    }
    cnt = j;
  }
  total = 0;
  for (uint j = 0; j < cnt; j++) {
    total = f64_add(total, f32_to_f64(uint(keys[j] >> 32)));
  }
  const uint pos = step[0];
  const ulong seed = (ulong(p.seed_hi) << 32) | p.seed_lo;
  const ulong u = f64_mul(sample_uniform(seed, ulong(pos - p.pos0)), total);
  uint chosen = cnt - 1;
  ulong cum = 0;
  for (uint j = 0; j < cnt; j++) {
    cum = f64_add(cum, f32_to_f64(uint(keys[j] >> 32)));
    if (u < cum) {
      chosen = j;
      break;
    }
  }
  const uint id = sample_key_id(keys[chosen]);

  // More candidates than SAMPLE_MAX_K, and the last one kept may still count: not exact.
  const uint k_req = (p.top_k > 0 && p.top_k < SAMPLE_N) ? p.top_k : SAMPLE_N;
  const bool overflow = k_req > SAMPLE_MAX_K && uint(keys[k_eff - 1] >> 32) >= 0x25000000u;  // 2^-53
  status[0] = overflow ? 1u : 0u;

  step[0] = pos + 1;
  step[1] = id;
  if (id < SAMPLE_N) {  // always; keeps a bug from writing out of bounds
    if ((p.flags & SAMPLE_COUNT) != 0) {
      state[id] += 1;
    }
    if ((p.flags & SAMPLE_SEEN) != 0) {
      state[id] |= 0x80000000u;
    }
  }
}

// ---- logprobs -------------------------------------------------------------------------------

#define LOGPROB_TOPN 20

// The largest of the simdgroup's keys, in every lane (two 32-bit reductions).
inline ulong lp_simd_max_key(ulong k) {
  const uint hi = simd_max(uint(k >> 32));
  const uint lo = simd_max(uint(k >> 32) == hi ? uint(k) : 0u);
  return (ulong(hi) << 32) | lo;
}

// The largest of the threadgroup's keys, in every thread (all threads call it; red holds 32).
inline ulong lp_max_key(ulong k, threadgroup ulong* red, uint lane, uint sg, uint nsg) {
  k = lp_simd_max_key(k);
  if (lane == 0) {
    red[sg] = k;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  k = lp_simd_max_key(lane < nsg ? red[lane] : 0ul);
  threadgroup_barrier(mem_flags::mem_threadgroup);  // red is read before the next call writes it
  return k;
}

// The threadgroup's max (MAX) or sum of x, in every thread.
template <bool MAX>
inline float lp_reduce(float x, threadgroup float* red, uint lane, uint sg, uint nsg) {
  x = MAX ? simd_max(x) : simd_sum(x);
  if (lane == 0) {
    red[sg] = x;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float y = lane < nsg ? red[lane] : (MAX ? -INFINITY : 0.0f);
  x = MAX ? simd_max(y) : simd_sum(y);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return x;
}

// The LOGPROB_TOPN largest keys of ids [begin, end) of x (or of the keys in cand when LOGITS is
// false), largest first, into res (by thread 0; 0 where there are fewer).
template <bool LOGITS>
inline void lp_top(device const float* x, device const ulong* cand, uint begin, uint end, threadgroup ulong* red,
                   threadgroup ulong* res, uint tid, uint ntg, uint lane, uint sg, uint nsg) {
  ulong last = ~0ul;
  for (uint r = 0; r < LOGPROB_TOPN; r++) {
    ulong k = 0;
    for (uint i = begin + tid; i < end; i += ntg) {
      const ulong key = LOGITS ? sample_key(x[i], i) : cand[i];
      if (key < last) {
        k = max(k, key);
      }
    }
    k = lp_max_key(k, red, lane, sg, nsg);
    if (tid == 0) {
      res[r] = k;
    }
    last = k;
  }
}

kernel void logprob_partial(device const float* x_rows [[buffer(0)]],  // [R][n] penalised ([>= n] for one)
                            device float2* ms_rows [[buffer(1)]],       // [R][groups] (max, Σ exp(x - max))
                            device ulong* top_rows [[buffer(2)]],       // [R][groups][LOGPROB_TOPN] keys
                            uint2 tg [[threadgroup_position_in_grid]],  // (group, row)
                            uint tid [[thread_index_in_threadgroup]],
                            uint ntg [[threads_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float fred[32];
  threadgroup ulong kred[32];
  threadgroup ulong res[LOGPROB_TOPN];
  // This row's sequence: everything below is the one-row kernel on these.
  const uint g = tg.x;
  const ulong groups = (SAMPLE_N + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
  device const float* x = x_rows + ulong(tg.y) * SAMPLE_N;
  device float2* ms = ms_rows + ulong(tg.y) * groups;
  device ulong* top = top_rows + ulong(tg.y) * groups * LOGPROB_TOPN;
  const uint begin = g * SAMPLE_CHUNK, end = min(begin + SAMPLE_CHUNK, SAMPLE_N);
  float m = -INFINITY;
  for (uint i = begin + tid; i < end; i += ntg) {
    m = max(m, x[i]);
  }
  m = lp_reduce<true>(m, fred, lane, sg, nsg);
  float sum = 0.0f;
  if (m > -INFINITY) {  // a chunk of -inf (the vocabulary limit's bias) adds nothing
    for (uint i = begin + tid; i < end; i += ntg) {
      sum += exp(x[i] - m);
    }
  }
  sum = lp_reduce<false>(sum, fred, lane, sg, nsg);
  if (tid == 0) {
    ms[g] = float2(m, sum);
  }
  lp_top<true>(x, nullptr, begin, end, kred, res, tid, ntg, lane, sg, nsg);
  if (tid == 0) {
    for (uint r = 0; r < LOGPROB_TOPN; r++) {
      top[ulong(g) * LOGPROB_TOPN + r] = res[r];
    }
  }
}

kernel void logprob_final(device const float* x_rows [[buffer(0)]],   // [R][n] penalised ([>= n] for one)
                          device const float2* ms_rows [[buffer(1)]],  // [R][groups] logprob_partial's
                          device const ulong* top_rows [[buffer(2)]],  // [R][groups][TOPN] logprob_partial's
                          device const uint* steps [[buffer(3)]],      // [R]{pos, token}: the chosen token
                          device float* outs [[buffer(4)]],            // [R][2 + 2·LOGPROB_TOPN], see above
                          uint row [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint ntg [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup ulong kred[32];
  threadgroup ulong res[LOGPROB_TOPN];
  const uint groups = (SAMPLE_N + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
  // This row's sequence: everything below is the one-row kernel on these.
  device const float* x = x_rows + ulong(row) * SAMPLE_N;
  device const float2* ms = ms_rows + ulong(row) * groups;
  device const ulong* top = top_rows + ulong(row) * groups * LOGPROB_TOPN;
  device const uint* step = steps + 2 * row;
  device float* out = outs + ulong(row) * (2 + 2 * LOGPROB_TOPN);
  float M = -INFINITY;
  for (uint g = 0; g < groups; g++) {
    M = max(M, ms[g].x);
  }
  float S = 0.0f;
  for (uint g = 0; g < groups; g++) {
    if (ms[g].x > -INFINITY) {
      S += ms[g].y * exp(ms[g].x - M);
    }
  }
  const float logZ = M + log(S);
  const uint token = step[1];
  if (tid == 0) {
    out[0] = token < SAMPLE_N ? x[token] - logZ : -INFINITY;
    out[1] = as_type<float>(token);
  }
  lp_top<false>(nullptr, top, 0, groups * LOGPROB_TOPN, kred, res, tid, ntg, lane, sg, nsg);
  if (tid == 0) {
    for (uint r = 0; r < LOGPROB_TOPN; r++) {
      out[2 + 2 * r] = as_type<float>(sample_key_id(res[r]));
      out[3 + 2 * r] = as_type<float>(sample_key_bits(res[r])) - logZ;
    }
  }
}

// ---- test hook ------------------------------------------------------------------------------

constant uint SAMPLE_PROBE_OP [[function_constant(2)]];

// out[i] = op(a[i], b[i]): 0 f32 add, 1 f32 mul, 2 f32 div, 3 f32 exp(a), 4 f64 add, 5 f64 mul,
// 6 f32 -> f64, 7 the uniform for seed a, step b, 8 p = exp((a - b.lo) / b.hi) as sample_final.
kernel void sample_probe(device const ulong* a [[buffer(0)]],
                         device const ulong* b [[buffer(1)]],
                         device ulong* out [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
  const ulong x = a[i], y = b[i];
  const uint xl = uint(x), yl = uint(y), yh = uint(y >> 32);
  ulong r = 0;
  switch (SAMPLE_PROBE_OP) {
    case 0: r = f32_add(xl, yl); break;
    case 1: r = f32_mul(xl, yl); break;
    case 2: r = f32_div(xl, yl); break;
    case 3: r = f32_exp(xl); break;
    case 4: r = f64_add(x, y); break;
    case 5: r = f64_mul(x, y); break;
    case 6: r = f32_to_f64(xl); break;
    case 7: r = sample_uniform(x, y); break;
    case 8: r = f32_exp(f32_div(f32_add(xl, yl ^ 0x80000000u), yh)); break;
  }
  out[i] = r;
}
