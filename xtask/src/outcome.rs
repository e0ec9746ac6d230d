//! What a tier came to: libtest's counts summed over the commands that ran its tests.

use std::process::Command;

use crate::tools::run_echo;

/// What one tier came to.
pub(crate) enum TierOutcome {
    Ran { passed: u64, failed: u64 },
    Broken(String),
    Skipped(String),
}

/// Sums libtest's `test result:` lines.
pub(crate) fn count_results(output: &str) -> (u64, u64) {
    let mut totals = (0, 0);
    for line in output.lines().filter(|l| l.contains("test result:")) {
        let num = |word: &str| {
            line.split(';')
                .find(|part| part.trim_end().ends_with(word))
                .and_then(|part| part.split_whitespace().rev().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        totals.0 += num("passed");
        totals.1 += num("failed");
    }
    totals
}

pub(crate) fn outcome_of(result: Result<(bool, String), String>) -> TierOutcome {
    match result {
        Err(e) => TierOutcome::Broken(e),
        Ok((ok, text)) => {
            let (passed, failed) = count_results(&text);
            if !ok && failed == 0 {
                TierOutcome::Broken("the command failed before reporting tests (see above)".into())
            } else if passed + failed == 0 {
                TierOutcome::Broken("no test ran".into())
            } else {
                TierOutcome::Ran { passed, failed }
            }
        }
    }
}

/// Runs every command (test binaries of one tier) and sums their results.
pub(crate) fn run_all(commands: impl Iterator<Item = Command>) -> TierOutcome {
    run_chains(vec![commands.collect()])
}

/// [`run_all`] of several chains side by side: each chain's commands in order on a thread of
/// its own (for commands that leave a core idle, such as hiprtc compiling one program at a time);
/// every command's output is printed whole when it ends.
pub(crate) fn run_chains(chains: Vec<Vec<Command>>) -> TierOutcome {
    // one chain's commands in order, stopping at one that cannot start
    let run_chain = |chain: Vec<Command>| -> Result<Vec<(bool, String)>, String> {
        chain.into_iter().map(|mut c| run_echo(&mut c)).collect()
    };
    let results: Result<Vec<Vec<(bool, String)>>, String> = std::thread::scope(|s| {
        let handles: Vec<_> = chains
            .into_iter()
            .map(|chain| s.spawn(move || run_chain(chain)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a chain's thread panicked".into()))
            })
            .collect()
    });
    outcome_of(results.map(|chains| {
        chains
            .into_iter()
            .flatten()
            .fold((true, String::new()), |(all_ok, all), (ok, text)| {
                (all_ok && ok, all + &text)
            })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_counted() {
        let out = "test result: ok. 19 passed; 0 failed; 0 ignored\nnoise\n\
                   test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured\n";
        assert_eq!(count_results(out), (22, 1));
        assert_eq!(count_results("nothing here"), (0, 0));
    }

    #[test]
    fn a_failed_command_without_results_is_a_broken_tier() {
        assert!(matches!(
            outcome_of(Ok((false, "error: could not compile".into()))),
            TierOutcome::Broken(_)
        ));
        assert!(matches!(
            outcome_of(Ok((true, String::new()))),
            TierOutcome::Broken(_)
        ));
        assert!(matches!(
            outcome_of(Ok((
                false,
                "test result: FAILED. 1 passed; 2 failed;".into()
            ))),
            TierOutcome::Ran {
                passed: 1,
                failed: 2
            }
        ));
    }
}
