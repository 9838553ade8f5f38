// embed.metal: the token embedding of a decode step, read on the GPU. Row step.token of the
// 4-bit MLX affine embedding E [VOCAB][H] (engine/quant's format: H/8 uint32 words per row, values
// least significant nibble first; one bf16 scale and bias per 64 values) is dequantized into a
// float32 vector, exactly as quant.Matrix.DequantRow does:
//
//   out[k] = float(scale[k/64]) * float(q_k) + float(bias[k/64])
//
// scale·q is exact in float32 (8 + 4 significant bits), so the result is the same bits whether
// or not the compiler fuses the multiply-add.
//
// step (buffer 3) is the decode step's {pos, token}. A token id >= EMBED_VOCAB (EmbedHostRow) leaves
// its row of out as it was: the host wrote that row itself (an image's embedding, which replaces
// the image-pad token's). The selection kernels never produce such an id, and it reads nothing.
//
// Geometry: one thread per uint32 word (8 values, two float4 stores): dispatchThreads(H/8) in
// threadgroups of EmbedThreads (64), so H = 2048 is 256 threads in 4 threadgroups (and a row of
// them per row of a multi-row step). H must be a multiple of 64.
#include <metal_stdlib>
using namespace metal;

constant uint EMBED_H [[function_constant(0)]];      // hidden size (2048), a multiple of 64
constant uint EMBED_VOCAB [[function_constant(1)]];  // rows of E (248320)

// embed_row dequantises word w (8 values) of the embedding row of token into out.
inline void embed_row(device const uint* words, device const bfloat* scales, device const bfloat* biases,
                      uint token_id, device float* out, uint w) {
  if (token_id >= EMBED_VOCAB) {
    return;  // the host's row
  }
  const uint words_per_row = EMBED_H / 8;
  const ulong row = ulong(token_id);
  const uint word = words[row * words_per_row + w];
  const ulong g = row * (EMBED_H / 64) + w / 8;  // 8 words per group of 64
  const float s = float(scales[g]);
  const float b = float(biases[g]);
  float v[8];
  for (uint i = 0; i < 8; i++) {
    v[i] = s * float((word >> (4 * i)) & 0xfu) + b;
  }
  device float4* o = (device float4*)(out + 8 * w);
  o[0] = float4(v[0], v[1], v[2], v[3]);
  o[1] = float4(v[4], v[5], v[6], v[7]);
}

// embed_q4 over R rows (the multi-row decode step: a row of threadgroups per row, grid
// (H/8 threads, R)) reads row r's {pos, token} at step[2r] and writes out[r]; each row is
// computed on its own, so it is bit-identical to a one-row dispatch on it. R = 1 is the one-row
// kernel.
kernel void embed_q4(device const uint* words [[buffer(0)]],     // [VOCAB][H/8]
                     device const bfloat* scales [[buffer(1)]],  // [VOCAB][H/64]
                     device const bfloat* biases [[buffer(2)]],  // [VOCAB][H/64]
                     device const uint* step [[buffer(3)]],      // [R]{pos, token}
                     device float* out [[buffer(4)]],            // [R][H]
                     uint2 g [[thread_position_in_grid]]) {      // (word, row)
  if (g.x < EMBED_H / 8) {
    embed_row(words, scales, biases, step[2 * g.y + 1], out + ulong(g.y) * EMBED_H, g.x);
  }
}

// embed_chunk is embed_q4 for a prefill chunk: row t of out ([T][H]) is the embedding of
// tokens[t]; grid (H/8 threads, T), threadgroups of EmbedThreads along the words.
kernel void embed_chunk(device const uint* words [[buffer(0)]],
                        device const bfloat* scales [[buffer(1)]],
                        device const bfloat* biases [[buffer(2)]],
                        device const uint* tokens [[buffer(3)]],  // [T]
                        device float* out [[buffer(4)]],          // [T][H]
                        uint2 g [[thread_position_in_grid]]) {    // (word, token)
  if (g.x < EMBED_H / 8) {
    embed_row(words, scales, biases, tokens[g.y], out + ulong(g.y) * EMBED_H, g.x);
  }
}
