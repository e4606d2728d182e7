//! Sixteen f32 lanes, the one vector type the fused convolution (conv_direct.rs) is written
//! against: AVX-512 registers where the CPU has them, a plain array otherwise. The kernels are
//! generic and `#[inline(always)]`, so the AVX-512 entry point (a `#[target_feature]` function)
//! compiles them into AVX-512 code while the portable build stays SSE2.

/// Lanes per vector.
pub const LANES: usize = 16;

/// The operations the fused convolution needs. Loads and stores take raw pointers: the kernels
/// check their buffers' lengths once per image, not once per load.
pub trait Lanes: Copy {
    fn zero() -> Self;
    fn splat(v: f32) -> Self;
    /// # Safety
    /// `p` points to `LANES` readable f32s.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` points to `LANES` writable f32s.
    unsafe fn store(self, p: *mut f32);
    /// self · b + c (fused where the hardware fuses).
    fn mul_add(self, b: Self, c: Self) -> Self;
    fn add(self, b: Self) -> Self;
    /// max(self, 0): ReLU.
    fn relu(self) -> Self;
    /// Where `cand > best` (ordered: a NaN never wins), `cand` and `cand_tag`; else `best`
    /// and `best_tag`. The first of equal maxima keeps winning, as in `max_pool`.
    fn take_greater(best: (Self, Self), cand: Self, cand_tag: Self) -> (Self, Self);
}

/// The portable lanes: an array LLVM vectorises for the baseline target; a·b + c unfused.
#[derive(Clone, Copy)]
pub struct Portable([f32; LANES]);

impl Lanes for Portable {
    #[inline(always)]
    fn zero() -> Self {
        Portable([0.0; LANES])
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        Portable([v; LANES])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees LANES readable values at p.
        Portable(unsafe { p.cast::<[f32; LANES]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees LANES writable values at p.
        unsafe { p.cast::<[f32; LANES]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    fn mul_add(self, b: Self, c: Self) -> Self {
        Portable(std::array::from_fn(|i| self.0[i] * b.0[i] + c.0[i]))
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| self.0[i] + b.0[i]))
    }
    #[inline(always)]
    fn relu(self) -> Self {
        Portable(self.0.map(|v| v.max(0.0)))
    }
    #[inline(always)]
    fn take_greater(best: (Self, Self), cand: Self, cand_tag: Self) -> (Self, Self) {
        let (mut v, mut t) = best;
        for i in 0..LANES {
            if cand.0[i] > v.0[i] {
                (v.0[i], t.0[i]) = (cand.0[i], cand_tag.0[i]);
            }
        }
        (v, t)
    }
}

#[cfg(target_arch = "x86_64")]
pub use avx512::Avx512;

/// `f()`, compiled for AVX-512 where the CPU has it: a plain loop over slices inside `f`
/// (inlined here) then vectorises 16 wide instead of the baseline's 4. Only for code whose
/// result does not depend on the width: Rust never fuses a·b + c on its own, so each element
/// is rounded the same either way.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if Avx512::available() {
        #[target_feature(enable = "avx512f")]
        fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { avx512(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{LANES, Lanes};
    use std::arch::x86_64::*;

    /// One AVX-512 register. Only built inside functions compiled with `avx512f` on a CPU
    /// that has it (`conv_direct`'s entry points check `available()` first).
    #[derive(Clone, Copy)]
    pub struct Avx512(__m512);

    impl Avx512 {
        pub fn available() -> bool {
            std::arch::is_x86_feature_detected!("avx512f")
        }
    }

    // SAFETY (every block below): these methods are only reached from code compiled with
    // `#[target_feature(enable = "avx512f")]`, entered after `Avx512::available()`; the
    // pointer contracts are the trait's.
    impl Lanes for Avx512 {
        #[inline(always)]
        fn zero() -> Self {
            Avx512(unsafe { _mm512_setzero_ps() })
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            Avx512(unsafe { _mm512_set1_ps(v) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            const _: () = assert!(LANES == 16);
            Avx512(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn mul_add(self, b: Self, c: Self) -> Self {
            Avx512(unsafe { _mm512_fmadd_ps(self.0, b.0, c.0) })
        }
        #[inline(always)]
        fn add(self, b: Self) -> Self {
            Avx512(unsafe { _mm512_add_ps(self.0, b.0) })
        }
        #[inline(always)]
        fn relu(self) -> Self {
            Avx512(unsafe { _mm512_max_ps(self.0, _mm512_setzero_ps()) })
        }
        #[inline(always)]
        fn take_greater(best: (Self, Self), cand: Self, cand_tag: Self) -> (Self, Self) {
            unsafe {
                let m = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(cand.0, best.0.0);
                (Avx512(_mm512_mask_blend_ps(m, best.0.0, cand.0)), Avx512(_mm512_mask_blend_ps(m, best.1.0, cand_tag.0)))
            }
        }
    }
}
