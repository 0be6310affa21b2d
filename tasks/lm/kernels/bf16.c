/* The bfloat16 kernels of a CPU with AVX-512 BF16 units: attention of a flat batch by path, and the
 * decoder's RMS norm and gated SiLU, each one pass over memory instead of torch's five to eight.
 *
 * Attention: built and loaded by tasks/lm/cpu_kernels.py; called by tasks/lm/flat_attention.py once per layer
 * for a whole flat batch. A segment is a stretch of the batch where each token sees the one before it;
 * its keys are its path (the head, every ancestor, then itself), read in path order straight from the
 * layer's key and value tensors, and each query sees a prefix of them, up to itself. No mask, no copy
 * of the queries, keys or values: each kv head's path keys are packed once per segment for the
 * multiply instructions, and every query head sharing that kv head reads them.
 *
 * Numbers as torch's own bfloat16 attention keeps them: the scores are exact bf16 products summed in
 * float32 (vdpbf16ps), the softmax runs in float32, the probabilities are rounded to bf16 for the
 * product with the values, which is summed in float32 and rounded to bf16 once at the end. A row's
 * result depends only on its own query, its keys and its count, in a fixed order: the same to the bit
 * whatever else is in the call, whichever thread computes it.
 *
 * Why by hand: torch 2.13's CPU SDPA kernel reaches about 13% of this machine kind's bf16 matmul peak
 * at head size 64 (docs/bfloat16.md), and no CPU matmul in torch returns a float32 product of bf16
 * inputs, so the scores cannot be computed with torch's matmuls without rounding them to bf16.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uint16_t bf16;

enum { TILE = 4,     /* query rows computed together */
       LANES = 16,   /* floats in a vector */
       SPAN = 64 };  /* keys are taken in multiples of this: four vectors of scores per row */

/* e^x: 2^(x log2 e) split into an integer power (scalef) and 2^f for |f| <= 1/2, the latter as its
 * Taylor series to degree 6 (relative error about 1e-7); x clamped to [-100, 88] (0 and float32's
 * largest powers come out). */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-100.0f)), _mm512_set1_ps(88.0f));
    __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    const float ln2 = 0.6931471805599453f;
    __m512 p = _mm512_set1_ps(ln2 * ln2 * ln2 * ln2 * ln2 * ln2 / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ln2 * ln2 * ln2 * ln2 * ln2 / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ln2 * ln2 * ln2 * ln2 / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ln2 * ln2 * ln2 / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ln2 * ln2 / 2.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ln2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The lanes of the vector at key `first` that lie before `count`. */
static inline __mmask16 before(int first, int count) {
    int left = count - first;
    return left >= LANES ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* Keys first .. first + 15 of a path (rows `index` of `keys`, `step` bf16 apart; past `length`,
 * zeros) as pairs of dimensions: for each pair p, the 16 keys' (2p, 2p + 1) side by side, the operand
 * vdpbf16ps multiplies a query's pair against. */
static void pack_keys(const bf16 *keys, long step, const int32_t *index, int length, int first, int dim,
                      bf16 *packed) {
    __mmask16 real = before(first, length);
    __m512i rows = _mm512_maskz_loadu_epi32(real, index + first);
    __m512i words = _mm512_mullo_epi32(rows, _mm512_set1_epi32((int)(step / 2)));
    for (int p = 0; p < dim / 2; p++) {
        __m512i pairs = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), real, words,
                                                    (const int32_t *)keys + p, 4);
        _mm512_storeu_si512(packed + (size_t)p * 2 * LANES, pairs);
    }
}

/* Values of path keys first .. first + 15 as pairs of keys: for each pair of keys and each
 * dimension, the two keys' values side by side, the operand a pair of probabilities multiplies. */
static void pack_values(const bf16 *values, long step, const int32_t *index, int length, int first, int dim,
                        bf16 *packed) {
    static const bf16 none[256];
    __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                   39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
    for (int key = first; key < first + LANES; key += 2) {
        const bf16 *a = key < length ? values + index[key] * step : none;
        const bf16 *b = key + 1 < length ? values + index[key + 1] * step : none;
        bf16 *to = packed + (size_t)(key - first) * dim;
        for (int d = 0; d < dim; d += 32) {
            __m512i x = _mm512_loadu_si512(a + d), y = _mm512_loadu_si512(b + d);
            _mm512_storeu_si512(to + 2 * d, _mm512_permutex2var_epi16(x, low, y));
            _mm512_storeu_si512(to + 2 * d + 32, _mm512_permutex2var_epi16(x, high, y));
        }
    }
}

static inline __m512bh pair_of(const bf16 *at) {
    return (__m512bh)_mm512_set1_epi32(*(const int32_t *)at);
}

/* TILE query rows (`real` of them written: `row[i]` seeing the first `seen[i]` packed keys, its
 * output to `dest[i]`; rows past `real` repeat one of them). */
static void attend_tile(const bf16 *const row[TILE], bf16 *const dest[TILE], const int seen[TILE], int real,
                        const bf16 *keys, const bf16 *values, int dim, float scale, float *score, bf16 *prob) {
    int most = 0;
    for (int i = 0; i < TILE; i++) most = seen[i] > most ? seen[i] : most;
    int span = (most + SPAN - 1) / SPAN * SPAN, pairs = dim / 2;
    float total[TILE];

    /* scores, 4 rows x 64 keys at a time */
    for (int block = 0; block < span / LANES; block += 4) {
        __m512 acc[TILE][4];
        for (int i = 0; i < TILE; i++)
            for (int u = 0; u < 4; u++) acc[i][u] = _mm512_setzero_ps();
        const bf16 *k = keys + (size_t)block * pairs * 2 * LANES;
        for (int p = 0; p < pairs; p++) {
            __m512bh key[4];
            for (int u = 0; u < 4; u++)
                key[u] = (__m512bh)_mm512_loadu_si512(k + ((size_t)u * pairs + p) * 2 * LANES);
            for (int i = 0; i < TILE; i++) {
                __m512bh q = pair_of(row[i] + 2 * p);
                for (int u = 0; u < 4; u++) acc[i][u] = _mm512_dpbf16_ps(acc[i][u], q, key[u]);
            }
        }
        for (int i = 0; i < TILE; i++)
            for (int u = 0; u < 4; u++)
                _mm512_storeu_ps(score + (size_t)i * span + (block + u) * LANES,
                                 _mm512_mul_ps(acc[i][u], _mm512_set1_ps(scale)));
    }

    /* softmax in float32; probabilities rounded to bf16, zero past each row's count */
    for (int i = 0; i < TILE; i++) {
        float *s = score + (size_t)i * span;
        __m512 top = _mm512_set1_ps(-__builtin_inff());
        for (int j = 0; j < span; j += LANES)
            top = _mm512_mask_max_ps(top, before(j, seen[i]), top, _mm512_loadu_ps(s + j));
        __m512 peak = _mm512_set1_ps(_mm512_reduce_max_ps(top)), sum = _mm512_setzero_ps();
        for (int j = 0; j < span; j += LANES) {
            __m512 e = _mm512_maskz_mov_ps(before(j, seen[i]), exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), peak)));
            sum = _mm512_add_ps(sum, e);
            _mm256_storeu_si256((__m256i *)(prob + (size_t)i * span + j), (__m256i)_mm512_cvtneps_pbh(e));
        }
        total[i] = _mm512_reduce_add_ps(sum);
    }

    /* probabilities times values, 4 rows x 64 dimensions at a time */
    for (int chunk = 0; chunk < dim; chunk += 64) {
        __m512 acc[TILE][4];
        for (int i = 0; i < TILE; i++)
            for (int u = 0; u < 4; u++) acc[i][u] = _mm512_setzero_ps();
        for (int pair = 0; pair < span / 2; pair++) {
            const bf16 *v = values + ((size_t)pair * dim + chunk) * 2;
            __m512bh value[4];
            for (int u = 0; u < 4; u++) value[u] = (__m512bh)_mm512_loadu_si512(v + u * 2 * LANES);
            for (int i = 0; i < TILE; i++) {
                __m512bh p = pair_of(prob + (size_t)i * span + 2 * pair);
                for (int u = 0; u < 4; u++) acc[i][u] = _mm512_dpbf16_ps(acc[i][u], p, value[u]);
            }
        }
        for (int i = 0; i < real; i++) {
            __m512 inverse = _mm512_set1_ps(total[i] > 0.0f ? 1.0f / total[i] : 0.0f);
            for (int u = 0; u < 4; u++)
                _mm256_storeu_si256((__m256i *)(dest[i] + chunk + u * LANES),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[i][u], inverse)));
        }
    }
}

/* Attention of a flat batch segment by segment. query (heads, L, dim) and out: element (h, t, d) at
 * h * *_head + t * *_pos + d; key and value (kv_heads, past + L, dim) likewise. segment: S rows of
 * (start, length, offset, count, shared): the segment's queries are sequence positions start .. start
 * + length - 1, its path the `count` key rows keys[offset ..], in path order, ending with the segment
 * itself, so its query i sees the first count - length + i + 1 of them; the first `shared` of them are
 * the previous segment's (whose packed blocks are kept). `longest`: the largest count.
 * Returns 0, or -1 for shapes it does not take, -2 without memory. */
int grebench_attention_paths(const bf16 *query, long query_head, long query_pos, const bf16 *key, long key_head,
                             long key_pos, const bf16 *value, long value_head, long value_pos, bf16 *out,
                             long out_head, long out_pos, int heads, int kv_heads, int dim, int segments,
                             const int32_t *segment, const int32_t *keys, int longest, float scale,
                             int threads) {
    if (dim % 64 || dim > 256 || kv_heads < 1 || heads % kv_heads || threads < 1 || key_pos % 2) return -1;
    int fold = heads / kv_heads, failed = 0;
    size_t width = (size_t)(longest + SPAN - 1) / SPAN * SPAN, size = width * dim;
    /* one packed path per kv head, kept from segment to segment */
    bf16 *packed_keys = aligned_alloc(64, kv_heads * size * sizeof(bf16));
    bf16 *packed_values = aligned_alloc(64, kv_heads * size * sizeof(bf16));
    if (!packed_keys || !packed_values) failed = 1;
#pragma omp parallel num_threads(threads) if (!failed)
    {
        float *score = aligned_alloc(64, TILE * width * sizeof(float));
        bf16 *prob = aligned_alloc(64, TILE * width * sizeof(bf16));
        if (!score || !prob) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        int stop;
#pragma omp atomic read
        stop = failed;
        for (int s = 0; s < segments && !stop; s++) {
            const int32_t *at = segment + 5 * s;
            int start = at[0], length = at[1], count = at[3], kept = at[4] / LANES;
            const int32_t *index = keys + at[2];
            int blocks = (count + SPAN - 1) / SPAN * SPAN / LANES - kept, rows = fold * length;
            int tiles = (rows + TILE - 1) / TILE;
#pragma omp for schedule(static)
            for (int job = 0; job < kv_heads * blocks; job++) {
                int h = job / blocks, block = kept + job % blocks;
                size_t place = h * size + (size_t)block * LANES * dim;
                pack_keys(key + h * key_head, key_pos, index, count, block * LANES, dim, packed_keys + place);
                pack_values(value + h * value_head, value_pos, index, count, block * LANES, dim, packed_values + place);
            }
            /* rows in order (query, head): the heads of one query see the same keys */
#pragma omp for schedule(dynamic, 1)
            for (int job = 0; job < kv_heads * tiles; job++) {
                int h = job / tiles, first = job % tiles * TILE, real = rows - first < TILE ? rows - first : TILE;
                const bf16 *row[TILE];
                bf16 *dest[TILE];
                int seen[TILE];
                for (int i = 0; i < TILE; i++) {
                    int r = first + (i < real ? i : real - 1), q = r / fold, head = h * fold + r % fold;
                    row[i] = query + head * query_head + (long)(start + q) * query_pos;
                    dest[i] = out + head * out_head + (long)(start + q) * out_pos;
                    seen[i] = count - length + q + 1;
                }
                attend_tile(row, dest, seen, real, packed_keys + h * size, packed_values + h * size, dim, scale,
                            score, prob);
            }
        }
        free(score);
        free(prob);
    }
    free(packed_keys);
    free(packed_values);
    return failed ? -2 : 0;
}

/* bf16 <-> float32, sixteen at a time (rounding to nearest even, as torch does). */
static inline __m512 widen(const bf16 *at) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)at)), 16));
}

static inline void narrow(bf16 *at, __m512 x) {
    _mm256_storeu_si256((__m256i *)at, (__m256i)_mm512_cvtneps_pbh(x));
}

static inline __m512 rounded(__m512 x) {   /* x as bf16 would hold it */
    return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(x));
}

/* The RMS norm of `rows` rows of `dim` (a multiple of 16): each row in float32 times the reciprocal
 * square root of its mean square plus `eps`, rounded to bf16, times `weight`, rounded again: the
 * steps and roundings of transformers' LlamaRMSNorm on bf16 weights, in one pass over the row. */
void grebench_rms_norm_bf16(const bf16 *x, const bf16 *weight, bf16 *out, long rows, int dim, float eps,
                            int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < rows; r++) {
        const bf16 *row = x + r * dim;
        __m512 squares = _mm512_setzero_ps();
        for (int d = 0; d < dim; d += LANES) {
            __m512 v = widen(row + d);
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(_mm512_reduce_add_ps(squares) / dim + eps));
        for (int d = 0; d < dim; d += LANES)
            narrow(out + r * dim + d, _mm512_mul_ps(widen(weight + d), rounded(_mm512_mul_ps(widen(row + d), scale))));
    }
}

/* silu(gate) * up over `count` values (a multiple of 16): silu in float32 rounded to bf16, the product
 * rounded again, as torch's two bf16 operations round them. */
void grebench_silu_mul_bf16(const bf16 *gate, const bf16 *up, bf16 *out, long count, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < count; i += LANES) {
        __m512 g = widen(gate + i);
        __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        narrow(out + i, _mm512_mul_ps(rounded(silu), widen(up + i)));
    }
}
