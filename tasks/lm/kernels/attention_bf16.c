/* Attention of the engine's pieces in bfloat16 on a CPU with AVX-512 BF16 units.
 *
 * Built and loaded by tasks/lm/cpu_attention.py; called by tasks/lm/flat_attention.py for one group
 * of pieces at a time. Each query row sees a prefix of its piece's keys (its path up to itself), given
 * as a count: nothing past a row's count is read into its result, and no mask tensor exists.
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

/* e^x for x <= 0: 2^(x log2 e) split into an integer power (scalef) and 2^f for |f| <= 1/2, the
 * latter as its Taylor series to degree 6 (relative error about 1e-7). */
static inline __m512 exp_nonpositive(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
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

/* One item's keys (width x dim) as pairs of dimensions: for each block of 16 keys and each pair p, the
 * 16 keys' (2p, 2p + 1) side by side, the operand vdpbf16ps multiplies a query's pair against. */
static void pack_keys(const bf16 *keys, bf16 *packed, int width, int dim) {
    const uint32_t *from = (const uint32_t *)keys;
    uint32_t *to = (uint32_t *)packed;
    int pairs = dim / 2;
    for (int block = 0; block < width / LANES; block++)
        for (int p = 0; p < pairs; p++)
            for (int j = 0; j < LANES; j++)
                to[(block * pairs + p) * LANES + j] = from[(block * LANES + j) * pairs + p];
}

/* One item's values (width x dim) as pairs of keys: for each pair of keys and each dimension, the two
 * keys' values side by side, the operand a pair of probabilities multiplies. */
static void pack_values(const bf16 *values, bf16 *packed, int width, int dim) {
    for (int pair = 0; pair < width / 2; pair++) {
        const bf16 *a = values + (size_t)(2 * pair) * dim, *b = a + dim;
        bf16 *to = packed + (size_t)pair * dim * 2;
        for (int d = 0; d < dim; d++) {
            to[2 * d] = a[d];
            to[2 * d + 1] = b[d];
        }
    }
}

static inline __m512bh pair_of(const bf16 *at) {
    return (__m512bh)_mm512_set1_epi32(*(const int32_t *)at);
}

/* Rows first .. first + TILE - 1 of one item (rows past the last repeat it and are not written). */
static void attend_tile(const bf16 *query, const int32_t *count, int rows, int first, const bf16 *keys,
                        const bf16 *values, bf16 *out, int dim, float scale, float *score, bf16 *prob) {
    int row[TILE], seen[TILE], most = 0;
    for (int i = 0; i < TILE; i++) {
        row[i] = first + i < rows ? first + i : rows - 1;
        seen[i] = count[row[i]];
        most = seen[i] > most ? seen[i] : most;
    }
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
                __m512bh q = pair_of(query + (size_t)row[i] * dim + 2 * p);
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
            __m512 e = _mm512_maskz_mov_ps(before(j, seen[i]), exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), peak)));
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
        for (int i = 0; i < TILE && first + i < rows; i++) {
            __m512 inverse = _mm512_set1_ps(total[i] > 0.0f ? 1.0f / total[i] : 0.0f);
            for (int u = 0; u < 4; u++)
                _mm256_storeu_si256((__m256i *)(out + (size_t)row[i] * dim + chunk + u * LANES),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[i][u], inverse)));
        }
    }
}

/* queries and out: (pieces, kv_heads, rows, dim); keys and values: (pieces, kv_heads, width, dim);
 * count: (pieces, rows), the keys each row sees, a prefix of its piece's keys (the same for every KV
 * head). dim and width multiples of 64. Returns 0, or -1 for shapes it does not take. */
int grebench_attention_bf16(const bf16 *queries, const bf16 *keys, const bf16 *values, const int32_t *count,
                            bf16 *out, int pieces, int kv_heads, int rows, int width, int dim, float scale,
                            int threads) {
    if (dim % 64 || width % SPAN || rows < 1 || threads < 1) return -1;
    long items = (long)pieces * kv_heads, tiles = (rows + TILE - 1) / TILE;
    size_t size = (size_t)width * dim;
    bf16 *packed_keys = aligned_alloc(64, items * size * sizeof(bf16));
    bf16 *packed_values = aligned_alloc(64, items * size * sizeof(bf16));
    if (!packed_keys || !packed_values) {
        free(packed_keys);
        free(packed_values);
        return -2;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long item = 0; item < items; item++) {
        pack_keys(keys + item * size, packed_keys + item * size, width, dim);
        pack_values(values + item * size, packed_values + item * size, width, dim);
    }
#pragma omp parallel num_threads(threads)
    {
        float *score = aligned_alloc(64, (size_t)TILE * width * sizeof(float));
        bf16 *prob = aligned_alloc(64, (size_t)TILE * width * sizeof(bf16));
#pragma omp for schedule(dynamic, 2)
        for (long job = 0; job < items * tiles; job++) {
            long item = job / tiles;
            attend_tile(queries + item * rows * dim, count + (item / kv_heads) * rows, rows, (int)(job % tiles) * TILE,
                        packed_keys + item * size, packed_values + item * size, out + item * rows * dim, dim, scale,
                        score, prob);
        }
        free(score);
        free(prob);
    }
    free(packed_keys);
    free(packed_values);
    return 0;
}
