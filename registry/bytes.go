package registry

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// FormatBytes writes n in binary units: "512 B", "1.5 MiB", "12.0 GiB".
func FormatBytes(n int64) string {
	if n == math.MaxInt64 {
		return "unlimited"
	}
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for math.Abs(v) >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}

// ParseBytes reads a size: a number with an optional unit, binary (KiB,
// MiB, GiB, TiB) or decimal (KB, MB, GB, TB; also K, M, G, T), case
// insensitive, optionally followed by "B": "8GiB", "512m", "1.5 GB",
// "1073741824". A percentage such as "75%" is of total, which must then
// be > 0.
func ParseBytes(s string, total int64) (int64, error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || f <= 0 || f > 100 || total <= 0 {
			return 0, fmt.Errorf("size %q: want a percentage in (0, 100] of a known total", s)
		}
		return int64(f / 100 * float64(total)), nil
	}
	i := strings.IndexFunc(t, func(r rune) bool { return unicode.IsLetter(r) })
	num, unit := t, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(t[:i]), strings.ToLower(t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (512MiB, 8GB, 75%%)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, t[i:])
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}
