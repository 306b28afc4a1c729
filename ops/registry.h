// The single list of built-in ops. Each ops/<name>.cpp defines one register_*_ops function
// adding its forward op and the backward ops its gradient rule emits.
#pragma once

#include "runtime/graph/op.h"

namespace remat {

void register_conv2d_ops(OpRegistry& r);       // conv2d (+ fused relu/relu6), its grads
void register_conv2d_transpose_ops(OpRegistry& r);  // conv2d_transpose (ConvTranspose2d)
void register_dense_ops(OpRegistry& r);        // dense / linear (+ fused bias/activation), grads
void register_activation_ops(OpRegistry& r);   // relu, relu6 and their grads
// sigmoid, tanh, hardsigmoid, hardswish, leaky_relu, gelu_erf, silu
void register_activation_curve_ops(OpRegistry& r);
void register_class_token_ops(OpRegistry& r);    // class_token (ViT), its weight gradient
void register_channel_scale_ops(OpRegistry& r);  // channel_scale (x [N, C, H, W] * s [N, C]), grad
void register_add_ops(OpRegistry& r);          // add (n-ary)
void register_concat_ops(OpRegistry& r);       // concat (channels), concat_slice
void register_flatten_ops(OpRegistry& r);      // flatten and its grad (reshape copies)
void register_batchnorm_ops(OpRegistry& r);    // batchnorm (train / inference), grads
void register_pool_ops(OpRegistry& r);         // maxpool, avgpool, global_avgpool, grads
void register_upsample_ops(OpRegistry& r);     // upsample (nearest / bilinear, integer factors), grad
void register_pad_crop_ops(OpRegistry& r);     // zeropad, crop (each the other's gradient)
void register_dropout_ops(OpRegistry& r);      // dropout (seeded, replayable), grad
void register_softmax_xent_ops(OpRegistry& r); // softmax_xent, softmax_xent_pixel, token_xent, grads
void register_embedding_ops(OpRegistry& r);    // embedding (token ids -> rows), its grad
void register_add_constant_ops(OpRegistry& r);  // add_constant (a constant table, a buffer)
void register_mul_table_ops(OpRegistry& r);  // mul_table (a constant or learned table)
void register_row_mean_ops(OpRegistry& r);  // row_mean (the mean of each row)
void register_channel_shift_ops(OpRegistry& r);  // channel_shift (x plus a per-row s), grad
void register_position_embedding_ops(OpRegistry& r);  // position_embedding (learned), its grad
void register_layernorm_ops(OpRegistry& r);    // layernorm (last dim), grads
void register_gelu_ops(OpRegistry& r);         // gelu (tanh approximation), its grad
void register_matmul_ops(OpRegistry& r);       // matmul (batched, transposes, scale)
void register_heads_ops(OpRegistry& r);        // split_heads, merge_heads
void register_attention_ops(OpRegistry& r);    // attention (fused, causal, dropout), its grad
void register_softmax_ops(OpRegistry& r);      // softmax (last dim, causal), its grad
void register_sgd_ops(OpRegistry& r);          // sgd (momentum, weight decay)
void register_adam_ops(OpRegistry& r);         // adam, adamw
void register_clip_grad_norm_ops(OpRegistry& r);  // clip_grad_norm (global-norm clipping)
void register_cast_ops(OpRegistry& r);         // cast (f32 <-> bf16)
void register_layout_ops(OpRegistry& r);       // layout (NCHW <-> NHWC), transpose
void register_roll_ops(OpRegistry& r);         // roll (torch.roll)
void register_relative_position_bias_ops(OpRegistry& r);  // Swin/MaxViT bias, its gradient
void register_grad_accumulate_ops(OpRegistry& r);  // grad_accumulate (micro-batch gradients)

// Every built-in op, registered once. A duplicate name throws.
OpRegistry make_builtin_registry();

}  // namespace remat
