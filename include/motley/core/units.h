// Physical quantities as distinct types: time, sizes, work and their rates.
// Each is a thin wrapper over a double so that a Seconds cannot be passed where Bytes are
// expected; only dimensionally meaningful operators are defined. Plain values; thread-safe.
#pragma once

#include <compare>
#include <ostream>

namespace motley {

template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double value) : value_(value) {}

  constexpr double value() const { return value_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity operator-() const { return Quantity(-value_); }
  constexpr Quantity operator*(double k) const { return Quantity(value_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(value_ / k); }
  // The ratio of two like quantities is a plain number.
  constexpr double operator/(Quantity o) const { return value_ / o.value_; }
  constexpr Quantity& operator+=(Quantity o) {
    value_ += o.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value_ -= o.value_;
    return *this;
  }
  constexpr Quantity& operator*=(double k) {
    value_ *= k;
    return *this;
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double value_ = 0.0;
};

template <class Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) {
  return q * k;
}

// Prints the bare value (test failure messages, debugging); user-facing output formats units.
template <class Tag>
std::ostream& operator<<(std::ostream& os, Quantity<Tag> q) {
  return os << q.value();
}

struct SecondsTag {};
struct BytesTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};
struct BytesPerSecondTag {};

using Seconds = Quantity<SecondsTag>;
using Bytes = Quantity<BytesTag>;
using Flops = Quantity<FlopsTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;
using BytesPerSecond = Quantity<BytesPerSecondTag>;

constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.value() / r.value()); }
constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b.value() / r.value()); }
constexpr Flops operator*(FlopsPerSecond r, Seconds t) { return Flops(r.value() * t.value()); }
constexpr Bytes operator*(BytesPerSecond r, Seconds t) { return Bytes(r.value() * t.value()); }

// Decimal prefixes, as vendors quote rates (1 TFLOP/s = 1e12 FLOP/s, 1 GB/s = 1e9 B/s).
constexpr double kKilo = 1e3;
constexpr double kMega = 1e6;
constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
// Binary prefix for memory capacities as operating systems report them.
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Division keeps decimal inputs exact: 5 / 1e6 is the double nearest 5e-6, 5 * 1e-6 is not.
constexpr Seconds microseconds(double us) { return Seconds(us / 1e6); }
constexpr Seconds milliseconds(double ms) { return Seconds(ms / 1e3); }
constexpr BytesPerSecond gigabytes_per_second(double gbps) { return BytesPerSecond(gbps * kGiga); }
constexpr FlopsPerSecond teraflops(double tflops) { return FlopsPerSecond(tflops * kTera); }

}  // namespace motley
