//! Double-precision lane operations: arithmetic, rounding, conversions, the parts of a float
//! (frexp, ldexp) and the steps of division (scale, fmas, fixup), as CDNA3's and RDNA3's
//! references define them. Results are correctly rounded where the hardware's are (add,
//! multiply, fma, conversions); the reciprocal and square-root estimates are given correctly
//! rounded, which the hardware's are within 1 ulp of.

use super::{pair, LaneCtx, LaneFn, LaneResult};

fn f64s(x: f64) -> LaneResult {
    pair(x.to_bits())
}

/// `x * 2^e` with one rounding, for any `e` (scaled in steps that cannot overflow early).
pub(crate) fn ldexp(mut x: f64, mut e: i32) -> f64 {
    let step = |n: i32| f64::from_bits(((1023 + n) as u64) << 52);
    while e > 1000 {
        x *= step(1000);
        e -= 1000;
        if x.is_infinite() {
            return x;
        }
    }
    while e < -1000 {
        // stop short of the subnormal range so the last step rounds once
        x *= step(-1000);
        e += 1000;
        if x == 0.0 {
            return x;
        }
    }
    if e >= -1022 {
        x * step(e)
    } else {
        x * step(-1022) * step(e + 1022)
    }
}

/// (mantissa in [0.5, 1) with x's sign, exponent) with x = mantissa * 2^exponent; zeros,
/// infinities and NaN give themselves and 0.
pub(crate) fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let (x, bias) = if x.abs() < f64::MIN_POSITIVE {
        (x * f64::from_bits((1023 + 64) << 52), 64)
    } else {
        (x, 0)
    };
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let mant = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (mant, exp - 1022 - bias)
}

/// The special cases of a quotient, else the approximation `q` with the quotient's sign.
pub(crate) fn div_fixup(q: f64, den: f64, num: f64) -> f64 {
    let negative = den.is_sign_negative() != num.is_sign_negative();
    let signed = |x: f64| if negative { -x.abs() } else { x.abs() };
    let invalid = den.is_nan()
        || num.is_nan()
        || (den == 0.0 && num == 0.0)
        || (den.is_infinite() && num.is_infinite());
    if invalid {
        f64::NAN
    } else if den == 0.0 || num.is_infinite() {
        signed(f64::INFINITY)
    } else if den.is_infinite() || num == 0.0 {
        signed(0.0)
    } else {
        signed(q)
    }
}

/// Whether `v_div_scale_f64` would scale its operand for numerator `num` over denominator
/// `den` (exponents far apart, or a denormal on the way), which the emulator refuses rather
/// than approximates.
pub(crate) fn div_would_scale(den: f64, num: f64) -> bool {
    let exp = |x: f64| ((x.to_bits() >> 52) & 0x7ff) as i32;
    let tiny = |x: f64| x != 0.0 && !x.is_normal() && x.is_finite();
    exp(num) - exp(den) >= 768 || tiny(den) || tiny(1.0 / den) || tiny(num / den) || exp(num) <= 53
}

/// The double-precision operation `name`, if it is one.
pub(super) fn lane_fn(name: &str) -> Option<LaneFn> {
    Some(match name {
        "v_add_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0) + c.f64(1)),
        "v_mul_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0) * c.f64(1)),
        "v_fma_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).mul_add(c.f64(1), c.f64(2))),
        "v_fmac_f64" => |c: &LaneCtx<'_>| {
            let r = c.vdst as usize;
            let acc = u64::from(c.w.v[r][c.lane]) | (u64::from(c.w.v[r + 1][c.lane]) << 32);
            f64s(c.f64(0).mul_add(c.f64(1), f64::from_bits(acc)))
        },
        "v_max_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).max(c.f64(1))),
        "v_min_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).min(c.f64(1))),
        "v_ldexp_f64" => |c: &LaneCtx<'_>| f64s(ldexp(c.f64(0), c.u(1) as i32)),
        "v_rcp_f64" => |c: &LaneCtx<'_>| f64s(1.0 / c.f64(0)),
        "v_rsq_f64" => |c: &LaneCtx<'_>| f64s(1.0 / c.f64(0).sqrt()),
        "v_sqrt_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).sqrt()),
        "v_floor_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).floor()),
        "v_ceil_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).ceil()),
        "v_trunc_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).trunc()),
        "v_rndne_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).round_ties_even()),
        "v_fract_f64" => |c: &LaneCtx<'_>| {
            let x = c.f64(0);
            // below 1 even where x - floor(x) rounds up to it
            f64s((x - x.floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff)))
        },
        "v_frexp_mant_f64" => |c: &LaneCtx<'_>| f64s(frexp(c.f64(0)).0),
        "v_frexp_exp_i32_f64" => |c: &LaneCtx<'_>| Some((frexp(c.f64(0)).1 as u32, None)),
        "v_cvt_f64_u32" => |c: &LaneCtx<'_>| f64s(f64::from(c.u(0))),
        "v_cvt_f64_i32" => |c: &LaneCtx<'_>| f64s(f64::from(c.u(0) as i32)),
        // saturating, NaN to 0 (as Rust's casts)
        "v_cvt_i32_f64" => |c: &LaneCtx<'_>| Some((c.f64(0) as i32 as u32, None)),
        "v_cvt_u32_f64" => |c: &LaneCtx<'_>| Some((c.f64(0) as u32, None)),
        "v_cvt_f64_f32" => |c: &LaneCtx<'_>| f64s(f64::from(c.f(0))),
        "v_cvt_f32_f64" => |c: &LaneCtx<'_>| super::f32s(c.f64(0) as f32),
        // with the scale flag clear (the only case v_div_scale_f64 lets through): an fma
        "v_div_fmas_f64" => |c: &LaneCtx<'_>| f64s(c.f64(0).mul_add(c.f64(1), c.f64(2))),
        "v_div_fixup_f64" => |c: &LaneCtx<'_>| f64s(div_fixup(c.f64(0), c.f64(1), c.f64(2))),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldexp_and_frexp_agree_with_their_definitions() {
        for &x in &[1.0, -3.5, 1e-310, 6.02e23, f64::MIN_POSITIVE, f64::MAX] {
            let (m, e) = frexp(x);
            assert!((0.5..1.0).contains(&m.abs()), "{x}: {m}");
            assert_eq!(ldexp(m, e), x, "{x}");
        }
        assert_eq!(ldexp(1.0, 2000), f64::INFINITY);
        assert_eq!(ldexp(1.0, -1074), f64::from_bits(1));
        assert_eq!(ldexp(1.0, -1076), 0.0);
        assert_eq!(frexp(0.0), (0.0, 0));
    }

    #[test]
    fn division_fixup_gives_the_special_quotients() {
        assert!(div_fixup(1.0, 0.0, 0.0).is_nan());
        assert_eq!(div_fixup(1.0, -0.0, 2.0), f64::NEG_INFINITY);
        assert_eq!(div_fixup(1.0, f64::INFINITY, -2.0), -0.0);
        assert_eq!(div_fixup(0.25, 4.0, 1.0), 0.25);
        assert!(!div_would_scale(3.0, 7.0));
        assert!(div_would_scale(1e-300, 1e300));
    }
}
