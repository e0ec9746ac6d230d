//! How far one run of a model is from another along the same text, in the manner of llama.cpp's
//! `llama-perplexity --kl-divergence`: both runs are fed the same tokens (teacher forcing), and
//! at each position the next-token distribution of the run under test is compared with the
//! reference's: the KL divergence KL(reference || test), and whether both rank the same token
//! first. The yardstick for "close" is the reference against itself with its floating-point
//! work in another order (a prompt fed at once against a token at a time): the distance that
//! rounding alone makes in that model.

use candle_core::Result;

/// The limits a run under test must keep (the decode issue's): its mean KL divergence from the
/// reference at most this multiple of the reference's own ...
pub const MAX_MEAN_RATIO: f64 = 1.5;
/// ... and its top-1 agreement with the reference at most this much below the reference's own.
pub const MAX_TOP1_SHORTFALL: f64 = 0.01;

/// One run against a reference, over every compared position.
#[derive(Debug, Clone, Copy)]
pub struct Divergence {
    pub positions: usize,
    /// Mean of KL(reference || test) in nats.
    pub mean: f64,
    /// Its 99th percentile.
    pub p99: f64,
    pub max: f64,
    /// The fraction of positions where both put the same token first.
    pub top1: f64,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mean KLD {:.3e}, p99 {:.3e}, max {:.3e}, top-1 agreement {:.2}% ({} positions)",
            self.mean,
            self.p99,
            self.max,
            100.0 * self.top1,
            self.positions
        )
    }
}

/// log-softmax of logits, in f64.
fn log_probs(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    let log_sum = sum.ln() + max;
    logits.iter().map(|&v| f64::from(v) - log_sum).collect()
}

/// The index of the largest logit (the first of equal ones).
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv {
                (i, x)
            } else {
                (bi, bv)
            }
        })
        .0
}

/// KL(reference || test) per position and the top-1 agreement of two runs' logits, position by
/// position; an error if the runs differ in length or vocabulary or a logit is not finite.
pub fn divergence(reference: &[Vec<f32>], test: &[Vec<f32>]) -> Result<Divergence> {
    if reference.len() != test.len() || reference.is_empty() {
        candle_core::bail!(
            "KL divergence: {} reference positions against {}",
            reference.len(),
            test.len()
        );
    }
    let mut klds = Vec::with_capacity(reference.len());
    let mut same = 0usize;
    for (i, (r, t)) in reference.iter().zip(test).enumerate() {
        if r.len() != t.len() || r.iter().chain(t).any(|v| !v.is_finite()) {
            candle_core::bail!(
                "KL divergence at position {i}: {} against {} logits, or one not finite",
                r.len(),
                t.len()
            );
        }
        let (lp, lq) = (log_probs(r), log_probs(t));
        let kld: f64 = lp.iter().zip(&lq).map(|(p, q)| p.exp() * (p - q)).sum();
        // rounding can leave a tiny negative sum where the two are equal
        klds.push(kld.max(0.0));
        same += usize::from(argmax(r) == argmax(t));
    }
    let positions = klds.len();
    let mean = klds.iter().sum::<f64>() / positions as f64;
    let mut sorted = klds.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = sorted[((positions as f64 * 0.99).ceil() as usize).clamp(1, positions) - 1];
    Ok(Divergence {
        positions,
        mean,
        p99,
        max: sorted[positions - 1],
        top1: same as f64 / positions as f64,
    })
}

/// Whether `test` is as close to the reference as the reference's own rounding allows
/// (`own`): mean KLD within [`MAX_MEAN_RATIO`] x own, top-1 agreement at most
/// [`MAX_TOP1_SHORTFALL`] below own; and the sentence that says so.
pub fn within(test: &Divergence, own: &Divergence) -> (bool, String) {
    let ratio = test.mean / own.mean;
    let passed =
        test.mean <= MAX_MEAN_RATIO * own.mean && test.top1 >= own.top1 - MAX_TOP1_SHORTFALL;
    (
        passed,
        format!(
            "{test}; {ratio:.2}x the reference's own mean KLD (limit {MAX_MEAN_RATIO}x), top-1 {:+.2} points from the reference's own (limit -{:.0})",
            100.0 * (test.top1 - own.top1),
            100.0 * MAX_TOP1_SHORTFALL
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_are_zero_apart_and_agree() {
        let a = vec![vec![1.0f32, 2.0, 3.0], vec![0.5, -1.0, 0.0]];
        let d = divergence(&a, &a).unwrap();
        assert_eq!(d.positions, 2);
        assert!(d.mean.abs() < 1e-15 && d.max.abs() < 1e-15);
        assert_eq!(d.top1, 1.0);
    }

    #[test]
    fn kld_is_the_textbook_value() {
        // p = softmax(0, 0) = (1/2, 1/2); q = softmax(ln 3, 0) = (3/4, 1/4)
        let p = vec![vec![0.0f32, 0.0]];
        let q = vec![vec![3f32.ln(), 0.0]];
        let d = divergence(&p, &q).unwrap();
        let want = 0.5 * (0.5f64 / 0.75).ln() + 0.5 * (0.5f64 / 0.25).ln();
        assert!((d.mean - want).abs() < 1e-6, "{} vs {want}", d.mean);
        // argmax of a tie is the first index, so both pick token 0
        assert_eq!(d.top1, 1.0);
        let flipped = vec![vec![0.0f32, 1.0]];
        assert_eq!(divergence(&q, &flipped).unwrap().top1, 0.0);
    }

    #[test]
    fn the_99th_percentile_and_the_limits() {
        let reference: Vec<Vec<f32>> = (0..100).map(|_| vec![0.0f32, 0.0]).collect();
        let mut test = reference.clone();
        test[7] = vec![5.0, 0.0];
        let d = divergence(&reference, &test).unwrap();
        assert!(d.p99 == 0.0 && d.max > 0.5, "{d}");
        let own = Divergence { mean: d.mean, ..d };
        assert!(within(&d, &own).0);
        let far = Divergence {
            mean: 2.0 * d.mean,
            ..d
        };
        assert!(!within(&far, &own).0);
        let disagreeing = Divergence {
            top1: d.top1 - 0.02,
            ..d
        };
        assert!(!within(&disagreeing, &own).0);
    }

    #[test]
    fn mismatched_or_non_finite_runs_are_errors() {
        let a = vec![vec![0.0f32, 1.0]];
        assert!(divergence(&a, &[]).is_err());
        assert!(divergence(&a, &[vec![0.0]]).is_err());
        assert!(divergence(&a, &[vec![f32::NAN, 0.0]]).is_err());
    }
}
