// make_builtin_registry(): the one explicit list of ops (no static self-registration).
#include "ops/registry.h"

namespace remat {

OpRegistry make_builtin_registry() {
  OpRegistry r;
  register_conv2d_ops(r);
  register_conv2d_transpose_ops(r);
  register_dense_ops(r);
  register_activation_ops(r);
  register_activation_curve_ops(r);
  register_channel_scale_ops(r);
  register_class_token_ops(r);
  register_add_ops(r);
  register_concat_ops(r);
  register_flatten_ops(r);
  register_batchnorm_ops(r);
  register_pool_ops(r);
  register_upsample_ops(r);
  register_pad_crop_ops(r);
  register_dropout_ops(r);
  register_softmax_xent_ops(r);
  register_embedding_ops(r);
  register_add_constant_ops(r);
  register_mul_table_ops(r);
  register_row_mean_ops(r);
  register_channel_shift_ops(r);
  register_position_embedding_ops(r);
  register_layernorm_ops(r);
  register_gelu_ops(r);
  register_matmul_ops(r);
  register_heads_ops(r);
  register_softmax_ops(r);
  register_attention_ops(r);
  register_sgd_ops(r);
  register_adam_ops(r);
  register_clip_grad_norm_ops(r);
  register_cast_ops(r);
  register_layout_ops(r);
  register_roll_ops(r);
  register_relative_position_bias_ops(r);
  register_grad_accumulate_ops(r);
  return r;
}

}  // namespace remat
