/// What a 16-bit matmul does to each f32 result before storing it in its output's
/// dtype: fusing these saves a pass over the output (and a full-precision copy of it).
pub enum Epilogue<'a, T> {
    None,
    /// Forward: v + bias[col], then max(v, 0) when `relu`.
    Bias {
        bias: &'a T,
        relu: bool,
    },
    /// Backward through a ReLU: v where act > 0, else 0 (`act` is the ReLU's output).
    ReluMask(&'a T),
}

/// What an int8 GEMM (`QuantOps::matmul_i8_dequant`) does to each i32 accumulator to store it
/// as f32: an int8 layer's dequantize, bias and ReLU, fused so the i32 tensor is never written.
///
/// out = (acc as f32) · scale, then + bias[col], then max(·, 0) when `relu`: the same f32
/// operations in the same order as `dequantize`, `bias_add` and `relu` one after another, so
/// the fused output equals theirs bit for bit on every backend. With `act_scale`, scale is
/// act_scale · scales[col] (one f32 product, as the host would form it).
pub struct Dequant<'a, T> {
    /// f32 [1, 1] (one scale) or [1, n] (one per output column), typically s_x · s_W[col].
    pub scales: &'a T,
    /// f32 [1, n], or none.
    pub bias: Option<&'a T>,
    pub relu: bool,
    /// f32 [1, 1] multiplied into every scale, or none: a dynamic activation scale s_x that
    /// `quantize` left on the device, so scales can hold s_W alone and nothing is read back.
    pub act_scale: Option<&'a T>,
}
