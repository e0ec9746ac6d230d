//! Half-precision lane operations beyond the basic arithmetic: fused multiply-add, rounding,
//! the reciprocal, division's fixup and conversion to i16. Each is computed exactly (or in a
//! wider format) and rounded once to f16, to nearest even.

use super::super::f32_to_f16;
use super::fp64::div_fixup;
use super::{LaneCtx, LaneFn, LaneResult};

fn h(x: f32) -> LaneResult {
    Some((u32::from(f32_to_f16(x)), None))
}

/// f64 to f16 by way of f32: exact whenever the f64 holds an f16 operation's result exactly
/// or to within f32's precision (products of halves, their sums with a half).
fn h64(x: f64) -> LaneResult {
    h(x as f32)
}

pub(super) fn lane_fn(name: &str) -> Option<LaneFn> {
    Some(match name {
        "v_fma_f16" => {
            |c: &LaneCtx<'_>| h64(f64::from(c.h(0)).mul_add(f64::from(c.h(1)), f64::from(c.h(2))))
        }
        "v_trunc_f16" => |c: &LaneCtx<'_>| h(c.h(0).trunc()),
        "v_floor_f16" => |c: &LaneCtx<'_>| h(c.h(0).floor()),
        "v_ceil_f16" => |c: &LaneCtx<'_>| h(c.h(0).ceil()),
        "v_rndne_f16" => |c: &LaneCtx<'_>| h(c.h(0).round_ties_even()),
        "v_rcp_f16" => |c: &LaneCtx<'_>| h64(1.0 / f64::from(c.h(0))),
        "v_sqrt_f16" => |c: &LaneCtx<'_>| h64(f64::from(c.h(0)).sqrt()),
        "v_div_fixup_f16" => |c: &LaneCtx<'_>| {
            h64(div_fixup(
                f64::from(c.h(0)),
                f64::from(c.h(1)),
                f64::from(c.h(2)),
            ))
        },
        "v_cvt_i16_f16" => |c: &LaneCtx<'_>| Some((c.h(0) as i16 as u16 as u32, None)),
        "v_cvt_u16_f16" => |c: &LaneCtx<'_>| Some((c.h(0) as u16 as u32, None)),
        _ => return None,
    })
}
