// im2col's index, shared by conv.wgsl and conv16.wgsl (the layouts are in conv.wgsl's header):
// the CHW source index of column element e of the geometry in `p`, or NO_TAP where the 3×3
// patch reaches outside the image (a zero of the padding).
const NO_TAP: u32 = 0xffffffffu;

fn tap_source(e: u32) -> u32 {
    let k9 = 9u * p.channels;
    let row = e / k9;
    let col = e % k9;
    let c = col / 9u;
    let ky = col % 9u / 3u;
    let kx = col % 3u;
    let px = row % p.width;
    let t = row / p.width;
    let py = t % p.height;
    let n = t / p.height;
    // Unsigned wrap-around makes the taps left of / above the image huge, so one test each.
    let sy = py + ky - 1u;
    let sx = px + kx - 1u;
    if sy < p.height && sx < p.width {
        return ((n * p.channels + c) * p.height + sy) * p.width + sx;
    }
    return NO_TAP;
}
