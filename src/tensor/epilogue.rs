/// What a 16-bit matmul does to each f32 result before storing it in its output's
/// dtype: fusing these saves a pass over the output (and a full-precision copy of it).
pub enum Epilogue<'a, T> {
    None,
    /// Forward: v + bias[col], then max(v, 0) when `relu`.
    Bias { bias: &'a T, relu: bool },
    /// Backward through a ReLU: v where act > 0, else 0 (`act` is the ReLU's output).
    ReluMask(&'a T),
}
