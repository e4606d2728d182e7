// The CNN's convolution ops on the CUDA backend (ConvOps), compiled by NVRTC at first use
// behind float16.cuh. The same formulas as shaders/conv.wgsl, whose header gives the layouts
// (CHW images, HWC rows, cols [N·H·W, 9·C] with column c·9 + ky·3 + kx); the CPU backend
// (src/device/cpu/conv.rs) is the reference. One thread per output element in a grid-stride
// loop, no atomics: col2im and the pool's backward gather instead of scattering. `n` counts
// the output elements; height, width and channels are the op's input images' (for the pool,
// its HWC input).

#define NO_TAP 0xffffffffffffffffull

// The coordinates of flat index e in an array [img][d2][d1][d0], innermost first.
struct Coords { u32 i0, i1, i2; u64 img; };

__device__ Coords split(u64 e, u32 d0, u32 d1, u32 d2) {
    Coords k;
    k.i0 = (u32)(e % d0);
    u64 t = e / d0;
    k.i1 = (u32)(t % d1);
    t /= d1;
    k.i2 = (u32)(t % d2);
    k.img = t / d2;
    return k;
}

// The CHW source index of column element e, or NO_TAP where the 3×3 patch reaches outside the
// image (a zero of the padding). Unsigned wrap-around makes taps left of / above the image
// huge, so one test each.
__device__ u64 tap_source(u64 e, u32 height, u32 width, u32 channels) {
    u64 k9 = 9ull * channels;
    u64 row = e / k9;
    u32 col = (u32)(e % k9);
    u32 c = col / 9u, ky = col % 9u / 3u, kx = col % 3u;
    u32 px = (u32)(row % width);
    u64 t = row / width;
    u32 py = (u32)(t % height);
    u64 img = t / height;
    u32 sy = py + ky - 1u, sx = px + kx - 1u;
    if (sy < height && sx < width) return ((img * channels + c) * height + sy) * width + sx;
    return NO_TAP;
}

extern "C" __global__ void im2col(const float* x, float* cols, u64 n, u32 height, u32 width, u32 channels) {
    GRID_STRIDE(e, n) {
        u64 s = tap_source(e, height, width, channels);
        cols[e] = s == NO_TAP ? 0.0f : x[s];
    }
}

// im2col into 16-bit columns for the mixed-precision CNN: each tap rounded as cast_to16 rounds
// it; nothing is counted (the columns copy values the layer before already produced).
extern "C" __global__ void im2col16(const float* x, u16* cols, u64 n, u32 height, u32 width, u32 channels, u32 bf16) {
    GRID_STRIDE(e, n) {
        u64 s = tap_source(e, height, width, channels);
        cols[e] = round_bits(s == NO_TAP ? 0.0f : x[s], bf16);
    }
}

// x = CHW images: each pixel's sum over the column entries im2col copied from it, in the order
// ky, kx (the CPU's order).
extern "C" __global__ void col2im(const float* cols, float* x, u64 n, u32 height, u32 width, u32 channels) {
    u64 k9 = 9ull * channels;
    GRID_STRIDE(e, n) {
        Coords k = split(e, width, height, channels);  // CHW
        u32 px = k.i0, py = k.i1, c = k.i2;
        u64 img = k.img;
        float s = 0.0f;
        for (u32 ky = 0; ky < 3u; ky++) {
            u32 oy = py + 1u - ky;
            if (oy >= height) continue;
            for (u32 kx = 0; kx < 3u; kx++) {
                u32 ox = px + 1u - kx;
                if (ox < width) s += cols[((img * height + oy) * width + ox) * k9 + c * 9u + ky * 3u + kx];
            }
        }
        x[e] = s;
    }
}

// out = pooled CHW images, argmax = each winner's index into x (HWC rows); the first maximum
// in the order (0,0), (0,1), (1,0), (1,1) wins. The host checked the indices fit 32 bits.
extern "C" __global__ void max_pool(const float* x, float* out, u32* argmax, u64 n, u32 height, u32 width, u32 channels) {
    u32 ho = height / 2u, wo = width / 2u;
    GRID_STRIDE(e, n) {
        Coords k = split(e, wo, ho, channels);  // pooled CHW
        u32 ox = k.i0, oy = k.i1, c = k.i2;
        u64 y0 = k.img * height + 2ull * oy;
        u64 best_i = (y0 * width + 2ull * ox) * channels + c;
        float best = x[best_i];
        for (u32 k = 1; k < 4u; k++) {
            u64 i = ((y0 + k / 2u) * width + 2ull * ox + k % 2u) * channels + c;
            float v = x[i];
            if (v > best) { best = v; best_i = i; }
        }
        out[e] = best;
        argmax[e] = (u32)best_i;
    }
}

// grad_in = HWC gradient of the pool's input: the output gradient at each winner, else 0.
extern "C" __global__ void max_pool_backward(const float* grad_out, const u32* argmax, float* grad_in, u64 n, u32 height, u32 width, u32 channels) {
    u32 ho = height / 2u, wo = width / 2u;
    GRID_STRIDE(e, n) {
        Coords k = split(e, channels, width, height);  // HWC
        u32 c = k.i0, px = k.i1, py = k.i2;
        float g = 0.0f;
        if (py / 2u < ho && px / 2u < wo) {
            u64 o = ((k.img * channels + c) * ho + py / 2u) * wo + px / 2u;
            if ((u64)argmax[o] == e) g = grad_out[o];
        }
        grad_in[e] = g;
    }
}
