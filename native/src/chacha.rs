//! The ChaCha20 keystream read as u64 words: the lucky split's generator.
//!
//! The block function is RFC 8439 section 2.3 (20 rounds) in the original layout of rand_chacha's
//! `ChaCha20Rng`: words 12-13 a 64-bit block counter from 0, words 14-15 the stream, here 0. A u64
//! draw is the next 8 keystream bytes read little-endian, so the stream equals
//! `ChaCha20Rng::from_seed(key)` read with `next_u64` (tests compare them). Blocks are made 32 at
//! a time, with AVX-512 or AVX2 when the CPU has them (checked at run time), else portable code.

/// Keystream blocks made per refill.
const BLOCKS: usize = 32;
/// u64 draws per refill (64-byte blocks).
const DRAWS: usize = BLOCKS * 8;
/// "expand 32-byte k".
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// A ChaCha20 keystream (stream 0) from block 0, read as u64 words.
#[derive(Clone)]
pub struct ChaCha20 {
    key: [u32; 8],
    /// The block counter of the next batch.
    counter: u64,
    draws: [u64; DRAWS],
    /// The next of `draws`; DRAWS once they are used up.
    pos: usize,
}

impl ChaCha20 {
    pub fn from_seed(seed: [u8; 32]) -> ChaCha20 {
        let mut key = [0u32; 8];
        for (k, chunk) in key.iter_mut().zip(seed.chunks_exact(4)) {
            *k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        ChaCha20 {
            key,
            counter: 0,
            draws: [0; DRAWS],
            pos: DRAWS,
        }
    }

    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        if self.pos >= DRAWS {
            self.refill();
        }
        let v = self.draws.get(self.pos).copied().unwrap_or_default();
        self.pos += 1;
        v
    }

    /// The draws already made and not yet given out, in stream order.
    #[inline(always)]
    pub fn buffered(&self) -> &[u64] {
        self.draws.get(self.pos..).unwrap_or_default()
    }

    /// Takes `n` of the `buffered` draws.
    #[inline(always)]
    pub fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(DRAWS);
    }

    #[inline(never)]
    fn refill(&mut self) {
        blocks(&self.key, self.counter, &mut self.draws);
        self.counter = self.counter.wrapping_add(BLOCKS as u64);
        self.pos = 0;
    }
}

/// Blocks `counter` to `counter + BLOCKS - 1` of the keystream, in stream order (the draws of block b are
/// `out[8b..8b + 8]`).
fn blocks(key: &[u32; 8], counter: u64, out: &mut [u64; DRAWS]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, checked just above.
            unsafe { x86::blocks_avx512(key, counter, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { x86::blocks_avx2(key, counter, out) };
            return;
        }
    }
    portable_blocks(key, counter, out);
}

/// The 20 rounds over the 16-word state `$x`, whose words are u32s or vectors of lanes.
macro_rules! double_rounds {
    ($x:ident, $add:expr, $xor:expr, $rotl16:expr, $rotl12:expr, $rotl8:expr, $rotl7:expr) => {
        macro_rules! qr {
            ($a:literal, $b:literal, $c:literal, $d:literal) => {
                $x[$a] = $add($x[$a], $x[$b]);
                $x[$d] = $rotl16($xor($x[$d], $x[$a]));
                $x[$c] = $add($x[$c], $x[$d]);
                $x[$b] = $rotl12($xor($x[$b], $x[$c]));
                $x[$a] = $add($x[$a], $x[$b]);
                $x[$d] = $rotl8($xor($x[$d], $x[$a]));
                $x[$c] = $add($x[$c], $x[$d]);
                $x[$b] = $rotl7($xor($x[$b], $x[$c]));
            };
        }
        for _ in 0..10 {
            qr!(0, 4, 8, 12);
            qr!(1, 5, 9, 13);
            qr!(2, 6, 10, 14);
            qr!(3, 7, 11, 15);
            qr!(0, 5, 10, 15);
            qr!(1, 6, 11, 12);
            qr!(2, 7, 8, 13);
            qr!(3, 4, 9, 14);
        }
    };
}

/// The 16 input words of block `counter`.
fn input_words(key: &[u32; 8], counter: u64) -> [u32; 16] {
    let mut s = [0u32; 16];
    s[..4].copy_from_slice(&SIGMA);
    s[4..12].copy_from_slice(key);
    s[12] = counter as u32;
    s[13] = (counter >> 32) as u32;
    s
}

fn portable_blocks(key: &[u32; 8], counter: u64, out: &mut [u64; DRAWS]) {
    for (block, draws) in out.chunks_exact_mut(8).enumerate() {
        let input = input_words(key, counter.wrapping_add(block as u64));
        let mut x = input;
        double_rounds!(
            x,
            u32::wrapping_add,
            |a: u32, b: u32| a ^ b,
            |a: u32| a.rotate_left(16),
            |a: u32| a.rotate_left(12),
            |a: u32| a.rotate_left(8),
            |a: u32| a.rotate_left(7)
        );
        for (draw, (xw, iw)) in draws.iter_mut().zip(x.chunks_exact(2).zip(input.chunks_exact(2))) {
            let (lo, hi) = (xw[0].wrapping_add(iw[0]), xw[1].wrapping_add(iw[1]));
            *draw = u64::from(lo) | (u64::from(hi) << 32);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCKS, DRAWS, SIGMA};

    /// Low and high halves of the block counters `counter + lane` for `N` lanes.
    fn counter_lanes<const N: usize>(counter: u64) -> ([u32; N], [u32; N]) {
        let (mut lo, mut hi) = ([0u32; N], [0u32; N]);
        for lane in 0..N {
            let c = counter.wrapping_add(lane as u64);
            lo[lane] = c as u32;
            hi[lane] = (c >> 32) as u32;
        }
        (lo, hi)
    }

    /// The 16 input words, one vector per word, one lane per block.
    macro_rules! input_vectors {
        ($splat:expr, $lo:expr, $hi:expr, $key:expr) => {{
            let [s0, s1, s2, s3] = SIGMA;
            let [k0, k1, k2, k3, k4, k5, k6, k7] = *$key;
            [
                $splat(s0),
                $splat(s1),
                $splat(s2),
                $splat(s3),
                $splat(k0),
                $splat(k1),
                $splat(k2),
                $splat(k3),
                $splat(k4),
                $splat(k5),
                $splat(k6),
                $splat(k7),
                $lo,
                $hi,
                $splat(0),
                $splat(0),
            ]
        }};
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn blocks_avx512(key: &[u32; 8], counter: u64, out: &mut [u64; DRAWS]) {
        for group in 0..BLOCKS / 16 {
            let first = group * 16;
            let (lo, hi) = counter_lanes::<16>(counter.wrapping_add(first as u64));
            // SAFETY: `lo` and `hi` are 16 u32s (64 bytes) each; loadu has no alignment requirement.
            let (lo, hi) = unsafe {
                (
                    _mm512_loadu_si512(lo.as_ptr().cast()),
                    _mm512_loadu_si512(hi.as_ptr().cast()),
                )
            };
            let input = input_vectors!(|v: u32| _mm512_set1_epi32(v as i32), lo, hi, key);
            let mut x = input;
            double_rounds!(
                x,
                |a, b| _mm512_add_epi32(a, b),
                |a, b| _mm512_xor_si512(a, b),
                |a| _mm512_rol_epi32::<16>(a),
                |a| _mm512_rol_epi32::<12>(a),
                |a| _mm512_rol_epi32::<8>(a),
                |a| _mm512_rol_epi32::<7>(a)
            );
            let mut w = [_mm512_setzero_si512(); 16];
            for ((w, x), input) in w.iter_mut().zip(x).zip(input) {
                *w = _mm512_add_epi32(x, input);
            }
            store_16_blocks(w, &mut out[8 * first..8 * (first + 16)]);
        }
    }

    /// Stores 16 blocks in stream order into `out` (128 draws), from vectors holding one word of
    /// every block each: a 16 x 16 transpose of 32-bit words, by 32-bit then 64-bit interleaves
    /// within 128-bit lanes, then 128-bit lanes across vectors.
    #[target_feature(enable = "avx512f")]
    fn store_16_blocks(w: [__m512i; 16], out: &mut [u64]) {
        let mut t = w;
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_epi32(w[2 * i], w[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(w[2 * i], w[2 * i + 1]);
        }
        // u[4g + j], lane l: words 4g..4g + 4 of block 4l + j.
        let mut u = t;
        for g in 0..4 {
            let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
            u[4 * g] = _mm512_unpacklo_epi64(a, c);
            u[4 * g + 1] = _mm512_unpackhi_epi64(a, c);
            u[4 * g + 2] = _mm512_unpacklo_epi64(b, d);
            u[4 * g + 3] = _mm512_unpackhi_epi64(b, d);
        }
        for j in 0..4 {
            let (g0, g1, g2, g3) = (u[j], u[4 + j], u[8 + j], u[12 + j]);
            let p0 = _mm512_shuffle_i32x4::<0x44>(g0, g1);
            let p1 = _mm512_shuffle_i32x4::<0xEE>(g0, g1);
            let p2 = _mm512_shuffle_i32x4::<0x44>(g2, g3);
            let p3 = _mm512_shuffle_i32x4::<0xEE>(g2, g3);
            let rows = [
                _mm512_shuffle_i32x4::<0x88>(p0, p2),
                _mm512_shuffle_i32x4::<0xDD>(p0, p2),
                _mm512_shuffle_i32x4::<0x88>(p1, p3),
                _mm512_shuffle_i32x4::<0xDD>(p1, p3),
            ];
            for (l, row) in rows.into_iter().enumerate() {
                let block = 4 * l + j;
                if let Some(draws) = out.get_mut(8 * block..8 * block + 8) {
                    // SAFETY: `draws` is 8 u64s (64 bytes); storeu has no alignment requirement.
                    unsafe { _mm512_storeu_si512(draws.as_mut_ptr().cast(), row) };
                }
            }
        }
    }

    #[target_feature(enable = "avx2")]
    fn rotl16(a: __m256i) -> __m256i {
        let m = _mm256_set_epi8(
            13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2, 13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2,
        );
        _mm256_shuffle_epi8(a, m)
    }

    #[target_feature(enable = "avx2")]
    fn rotl8(a: __m256i) -> __m256i {
        let m = _mm256_set_epi8(
            14, 13, 12, 15, 10, 9, 8, 11, 6, 5, 4, 7, 2, 1, 0, 3, 14, 13, 12, 15, 10, 9, 8, 11, 6, 5, 4, 7, 2, 1, 0, 3,
        );
        _mm256_shuffle_epi8(a, m)
    }

    /// 8x8 transpose of 32-bit words: vector i lane j becomes vector j lane i.
    #[target_feature(enable = "avx2")]
    fn transpose8(w: [__m256i; 8]) -> [__m256i; 8] {
        let mut t = w;
        for i in 0..4 {
            t[2 * i] = _mm256_unpacklo_epi32(w[2 * i], w[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_epi32(w[2 * i], w[2 * i + 1]);
        }
        // u[4g + j], lane l: words 4g..4g + 4 of column 4l + j.
        let mut u = t;
        for g in 0..2 {
            let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
            u[4 * g] = _mm256_unpacklo_epi64(a, c);
            u[4 * g + 1] = _mm256_unpackhi_epi64(a, c);
            u[4 * g + 2] = _mm256_unpacklo_epi64(b, d);
            u[4 * g + 3] = _mm256_unpackhi_epi64(b, d);
        }
        let mut rows = u;
        for j in 0..4 {
            rows[j] = _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]);
            rows[4 + j] = _mm256_permute2x128_si256::<0x31>(u[j], u[4 + j]);
        }
        rows
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn blocks_avx2(key: &[u32; 8], counter: u64, out: &mut [u64; DRAWS]) {
        for half in 0..BLOCKS / 8 {
            let first = half * 8;
            let (lo, hi) = counter_lanes::<8>(counter.wrapping_add(first as u64));
            // SAFETY: `lo` and `hi` are 8 u32s (32 bytes) each; loadu has no alignment requirement.
            let (lo, hi) = unsafe {
                (
                    _mm256_loadu_si256(lo.as_ptr().cast()),
                    _mm256_loadu_si256(hi.as_ptr().cast()),
                )
            };
            let input = input_vectors!(|v: u32| _mm256_set1_epi32(v as i32), lo, hi, key);
            let mut x = input;
            double_rounds!(
                x,
                |a, b| _mm256_add_epi32(a, b),
                |a, b| _mm256_xor_si256(a, b),
                rotl16,
                |a| _mm256_or_si256(_mm256_slli_epi32::<12>(a), _mm256_srli_epi32::<20>(a)),
                rotl8,
                |a| _mm256_or_si256(_mm256_slli_epi32::<7>(a), _mm256_srli_epi32::<25>(a))
            );
            let mut w = [_mm256_setzero_si256(); 16];
            for ((w, x), input) in w.iter_mut().zip(x).zip(input) {
                *w = _mm256_add_epi32(x, input);
            }
            let [w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15] = w;
            let low = transpose8([w0, w1, w2, w3, w4, w5, w6, w7]);
            let high = transpose8([w8, w9, w10, w11, w12, w13, w14, w15]);
            for (b, (low, high)) in low.into_iter().zip(high).enumerate() {
                let block = first + b;
                let draws = &mut out[8 * block..8 * block + 8];
                // SAFETY: `draws` is 8 u64s (64 bytes) of `out`, written as two 32-byte halves;
                // storeu has no alignment requirement.
                unsafe {
                    _mm256_storeu_si256(draws.as_mut_ptr().cast(), low);
                    _mm256_storeu_si256(draws.as_mut_ptr().add(4).cast(), high);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    fn keystream(rng: &mut ChaCha20, words: usize) -> Vec<u64> {
        (0..words).map(|_| rng.next_u64()).collect()
    }

    #[test]
    fn zero_key_is_rfc8439_appendix_a1() {
        // RFC 8439 A.1 test vectors #1 and #2: zero key and nonce, block counters 0 and 1.
        let block0 = "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7\
                      da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586";
        let block1 = "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed\
                      29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f";
        let want: Vec<u8> = (0..128)
            .map(|i| {
                let hex = if i < 64 { block0 } else { block1 };
                let j = (i % 64) * 2;
                u8::from_str_radix(&hex[j..j + 2], 16).unwrap()
            })
            .collect();
        let got: Vec<u8> = keystream(&mut ChaCha20::from_seed([0; 32]), 16)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn equals_rand_chacha_across_batches() {
        for seed in [[0u8; 32], [7; 32], core::array::from_fn(|i| (i as u8).wrapping_mul(37))] {
            let mut ours = ChaCha20::from_seed(seed);
            let mut theirs = ChaCha20Rng::from_seed(seed);
            for i in 0..5 * DRAWS + 3 {
                assert_eq!(ours.next_u64(), theirs.next_u64(), "word {i}");
            }
        }
    }

    #[test]
    fn counter_carries_into_word_13() {
        let seed = [0x5a; 32];
        let start = (1u64 << 32) - 5;
        let mut ours = ChaCha20::from_seed(seed);
        ours.counter = start;
        let mut theirs = ChaCha20Rng::from_seed(seed);
        theirs.set_word_pos(u128::from(start) * 16);
        for i in 0..2 * DRAWS {
            assert_eq!(ours.next_u64(), theirs.next_u64(), "word {i}");
        }
    }

    #[test]
    fn every_backend_makes_the_same_blocks() {
        let key: [u32; 8] = core::array::from_fn(|i| 0x0101_0101 * (i as u32 + 3));
        for counter in [0u64, 1, (1 << 32) - 7, u64::MAX - 3] {
            let mut want = [0u64; DRAWS];
            portable_blocks(&key, counter, &mut want);
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    let mut got = [0u64; DRAWS];
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    unsafe { x86::blocks_avx512(&key, counter, &mut got) };
                    assert_eq!(got, want, "avx512 at {counter}");
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut got = [0u64; DRAWS];
                    // SAFETY: the CPU has AVX2, checked just above.
                    unsafe { x86::blocks_avx2(&key, counter, &mut got) };
                    assert_eq!(got, want, "avx2 at {counter}");
                }
            }
        }
    }

    #[test]
    fn buffered_and_skip_follow_the_stream() {
        let mut a = ChaCha20::from_seed([9; 32]);
        let mut b = ChaCha20::from_seed([9; 32]);
        let mut taken = 0;
        while taken < 3 * DRAWS {
            let ahead: Vec<u64> = a.buffered().iter().take(3).copied().collect();
            if ahead.is_empty() {
                assert_eq!(a.next_u64(), b.next_u64());
                taken += 1;
                continue;
            }
            let n = (1 + taken % 3).min(ahead.len());
            for &v in &ahead[..n] {
                assert_eq!(v, b.next_u64());
            }
            a.skip(n);
            taken += n;
        }
        assert_eq!(a.next_u64(), b.next_u64());
    }
}
