// The sort of jaxcal's PAV kernel (pav_cpu.cc): order-preserving integer keys of scores
// and group ids, the kept work buffers, and a stable sort of the points by key (value
// buckets for scores, then most- / least-significant-digit radix passes).
//
// Included by pav_cpu.cc only: its names are in an anonymous namespace, as if written there.

#ifndef JAXCAL_NATIVE_PAV_SORT_H_
#define JAXCAL_NATIVE_PAV_SORT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace {

// Order-preserving unsigned key of a double (-0.0 and 0.0 share a key). Integer operations
// only: XLA's CPU threads treat subnormal operands as zero, and distinct subnormal scores
// must keep distinct keys, as in scikit-learn.
inline uint64_t KeyOfBits(uint64_t bits) {
  if (bits == (uint64_t{1} << 63)) bits = 0;             // -0.0 -> 0.0
  const uint64_t negative = uint64_t{0} - (bits >> 63);  // all ones for negative scores
  return bits ^ (negative | (uint64_t{1} << 63));       // branch-free: signs are random
}

inline uint64_t FloatKey(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return KeyOfBits(bits);
}

// float32 scores get the key of the same value as a double (widened exactly, with integer
// operations, so that subnormal float32 scores are not flushed).
inline uint64_t FloatKey(float v) {
  uint32_t f;
  std::memcpy(&f, &v, sizeof f);
  const uint64_t sign = uint64_t{f >> 31} << 63;
  const uint32_t exponent = (f >> 23) & 0xFF;
  uint32_t mantissa = f & 0x7FFFFF;
  uint64_t bits;
  if (exponent == 0xFF) {  // inf / nan (not passed by jaxcal's validation)
    bits = sign | (uint64_t{0x7FF} << 52) | (uint64_t{mantissa} << 29);
  } else if (exponent != 0) {
    bits = sign | (uint64_t{exponent - 127 + 1023} << 52) | (uint64_t{mantissa} << 29);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal float32: m * 2^-149 = 1.f * 2^(k - 149), k = leading bit of m
    const int k = 31 - __builtin_clz(mantissa);
    mantissa &= (uint32_t{1} << k) - 1;
    bits = sign | (uint64_t(k - 149 + 1023) << 52) | (uint64_t{mantissa} << (52 - k));
  }
  return KeyOfBits(bits);
}

inline double KeyValue(uint64_t key) {
  const uint64_t negative = (key >> 63) - 1;  // all ones for negative scores
  const uint64_t bits = key ^ (negative | (uint64_t{1} << 63));
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Order-preserving unsigned key of a signed integer.
inline uint64_t IntKey(int64_t v) { return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63); }

inline int BitLength(uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); }

constexpr int kMsdBits = 16;          // most-significant-digit passes: 65,536 buckets
constexpr int64_t kLsdMax = 1 << 14;  // segments this small are sorted in cache (LSD)
constexpr int64_t kInsertionMax = 24;
constexpr int kValueDepth = 2;  // levels of value buckets before radix passes
constexpr int64_t kKeepMax = int64_t{1} << 24;  // largest problem whose buffers are kept

// One copy of the points of a problem as parallel arrays that are permuted together:
// sort key, input position, target and weight.
struct Arrays {
  uint64_t* key;
  uint32_t* pos;
  double* y;
  double* w;
};

// Two copies (sorting passes go from one to the other) plus segment-local LSD buffers.
// The memory is kept and reused by later calls: fresh pages cost a page fault each, which
// at 1e6 points would be a fifth of the run time.
class Workspace {
 public:
  void Reserve(int64_t n) {
    if (n <= capacity_) return;
    const size_t per_point = 2 * (sizeof(uint64_t) + sizeof(uint32_t) + 2 * sizeof(double)) +
                             sizeof(uint64_t);
    memory_.reset(new char[per_point * n + 64]);
    char* p = memory_.get();
    auto take = [&](size_t bytes) {
      char* out = p;
      p += bytes;
      return out;
    };
    for (Arrays* a : {&a_, &b_}) {
      a->key = reinterpret_cast<uint64_t*>(take(n * sizeof(uint64_t)));
      a->y = reinterpret_cast<double*>(take(n * sizeof(double)));
      a->w = reinterpret_cast<double*>(take(n * sizeof(double)));
    }
    score_key_ = reinterpret_cast<uint64_t*>(take(n * sizeof(uint64_t)));
    a_.pos = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
    b_.pos = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
    capacity_ = n;
  }
  Arrays& a() { return a_; }
  Arrays& b() { return b_; }
  uint64_t* score_key() { return score_key_; }
  uint64_t lsd_key[2][kLsdMax];
  uint32_t lsd_at[2][kLsdMax];

 private:
  std::unique_ptr<char[]> memory_;
  int64_t capacity_ = 0;
  Arrays a_{}, b_{};
  uint64_t* score_key_ = nullptr;
};

inline void Move(const Arrays& src, int64_t i, const Arrays& dst, int64_t j) {
  dst.key[j] = src.key[i];
  dst.pos[j] = src.pos[i];
  dst.y[j] = src.y[i];
  dst.w[j] = src.w[i];
}

void CopyRange(const Arrays& src, const Arrays& dst, int64_t off, int64_t len) {
  std::memcpy(dst.key + off, src.key + off, len * sizeof(uint64_t));
  std::memcpy(dst.pos + off, src.pos + off, len * sizeof(uint32_t));
  std::memcpy(dst.y + off, src.y + off, len * sizeof(double));
  std::memcpy(dst.w + off, src.w + off, len * sizeof(double));
}

// Stable LSD radix sort of a cache-sized segment (keys as offsets from `lo`, with `bits`
// significant bits; 8-bit digits, digits shared by every key skipped); the result is
// gathered from `src` into `dst`.
void LsdSortInto(Workspace& ws, const Arrays& src, const Arrays& dst, int64_t off, int64_t len,
                 uint64_t lo, int bits) {
  uint64_t* k = ws.lsd_key[0];
  uint64_t* k2 = ws.lsd_key[1];
  uint32_t* at = ws.lsd_at[0];
  uint32_t* at2 = ws.lsd_at[1];
  const int digits = (bits + 7) / 8;
  uint32_t hist[8][256] = {};
  for (int64_t j = 0; j < len; ++j) {
    const uint64_t v = src.key[off + j] - lo;
    k[j] = v;
    at[j] = static_cast<uint32_t>(j);
    for (int d = 0; d < digits; ++d) ++hist[d][(v >> (8 * d)) & 255];
  }
  for (int d = 0; d < digits; ++d) {
    uint32_t* h = hist[d];
    if (h[(k[0] >> (8 * d)) & 255] == len) continue;  // every key has this digit
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (int64_t j = 0; j < len; ++j) {
      const uint32_t to = h[(k[j] >> (8 * d)) & 255]++;
      k2[to] = k[j];
      at2[to] = at[j];
    }
    std::swap(k, k2);
    std::swap(at, at2);
  }
  for (int64_t j = 0; j < len; ++j) Move(src, off + at[j], dst, off + j);
}

void InsertionSort(const Arrays& s, int64_t off, int64_t len) {
  for (int64_t i = off + 1; i < off + len; ++i) {
    const uint64_t k = s.key[i];
    const uint32_t p = s.pos[i];
    const double y = s.y[i], w = s.w[i];
    int64_t j = i;
    for (; j > off && s.key[j - 1] > k; --j) Move(s, j - 1, s, j);
    s.key[j] = k;
    s.pos[j] = p;
    s.y[j] = y;
    s.w[j] = w;
  }
}

void SortInto(Workspace& ws, const Arrays& src, const Arrays& dst, int64_t off, int64_t len,
              bool float_keys, int depth);

// Scatters the points [off, off + len) of `src` into `dst` by bucket (stable), then sorts
// each bucket in `dst`: larger ones recursively, then all small ones by one insertion pass.
template <typename Bucket>
void BucketSortInto(Workspace& ws, const Arrays& src, const Arrays& dst, int64_t off,
                    int64_t len, int64_t n_buckets, Bucket bucket, bool float_keys, int depth) {
  std::vector<int64_t> start(n_buckets + 1, 0);
  for (int64_t i = off; i < off + len; ++i) ++start[bucket(src.key[i]) + 1];
  start[0] = off;
  for (int64_t b = 0; b < n_buckets; ++b) start[b + 1] += start[b];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = off; i < off + len; ++i) Move(src, i, dst, next[bucket(src.key[i])]++);
  for (int64_t b = 0; b < n_buckets; ++b) {
    const int64_t count = start[b + 1] - start[b];
    if (count > kInsertionMax) {  // sort the bucket back into src, then return it
      SortInto(ws, dst, src, start[b], count, float_keys, depth + 1);
      CopyRange(src, dst, start[b], count);
    }
  }
  // The small buckets in one pass: only points inside the same bucket are out of order.
  InsertionSort(dst, off, len);
}

// Stable sort of the points [off, off + len) of `src` by key, written to the same range of
// `dst` (`src` is used as scratch).
//
// A segment larger than the cache takes most-significant-digit passes (kMsdBits of the key
// range each) until its buckets fit in cache. There, score keys (`float_keys`) are spread
// over one bucket per point by value, (x - min) / (max - min): for scores with a density
// this leaves buckets of a few points, finished by one insertion pass, so the sort costs
// two passes. Buckets that stay large (clustered or heavy-tailed scores) are split by value
// once more, then by LSD radix on the key bits, as are integer keys (group ids), so no input
// costs more than a few passes over its points.
void SortInto(Workspace& ws, const Arrays& src, const Arrays& dst, int64_t off, int64_t len,
              bool float_keys, int depth) {
  uint64_t lo = len > 0 ? src.key[off] : 0, hi = lo;
  for (int64_t i = off + 1; i < off + len; ++i) {
    lo = std::min(lo, src.key[i]);
    hi = std::max(hi, src.key[i]);
  }
  if (lo == hi || len <= kInsertionMax) {
    CopyRange(src, dst, off, len);
    if (lo != hi) InsertionSort(dst, off, len);
    return;
  }
  if (float_keys && depth < kValueDepth && len <= kLsdMax) {
    const double x_lo = KeyValue(lo);
    const double range = KeyValue(hi) - x_lo;
    const int64_t n_buckets = std::min<int64_t>(len, int64_t{1} << kMsdBits);
    const double scale = static_cast<double>(n_buckets) / range;
    // Scores closer than n_buckets / DBL_MAX (a subnormal or tiny range) overflow the scale
    // to inf, and 0 * inf is NaN, whose cast to an integer is undefined: such segments take
    // the radix passes below, which compare the keys' bits exactly.
    if (std::isfinite(range) && range > 0.0 && std::isfinite(scale)) {
      const double top = static_cast<double>(n_buckets - 1);
      const auto bucket = [=](uint64_t key) {
        // Monotone in the score (rounding is monotone); the top score lands on n_buckets.
        // The product is in [0, n_buckets] up to rounding (finite, not NaN: x - x_lo is
        // finite and >= 0, and so is the scale), and clamped to a valid bucket before the
        // cast (XLA's threads flush subnormal differences to 0: bucket 0). The clamp is
        // min / max (no branches); max(0.0, at) is 0.0 should `at` ever be NaN.
        const double at = (KeyValue(key) - x_lo) * scale;
        return static_cast<int64_t>(std::min(std::max(0.0, at), top));
      };
      return BucketSortInto(ws, src, dst, off, len, n_buckets, bucket, true, depth);
    }
  }
  const int bits = BitLength(hi - lo);
  if (len <= kLsdMax) return LsdSortInto(ws, src, dst, off, len, lo, bits);
  const int shift = std::max(0, bits - kMsdBits);
  const auto bucket = [=](uint64_t key) { return static_cast<int64_t>((key - lo) >> shift); };
  BucketSortInto(ws, src, dst, off, len, int64_t{1} << std::min(bits, kMsdBits), bucket,
                 float_keys, depth);
}

}  // namespace

#endif  // JAXCAL_NATIVE_PAV_SORT_H_
