//! The phases of disaggregated serving (llm-d, NVIDIA Dynamo, vLLM's disaggregated prefill):
//! prompt processing (prefill) and generation (decode) run on separate GPU pools, each pool a
//! job bound to the one model the deployment serves. What a pool's tokens count, and the J
//! per token of each phase, are defined here.
//!
//! An inference server counts every request it sees: a prefill pool generates the request's
//! first token (it runs with `max_tokens = 1`) and a decode pool counts the prompt it received
//! with the KV cache. Counting both would bill each prompt twice and give the prefill pool
//! generated tokens it never produced, so a pool counts only the tokens of its phase: prompt
//! tokens where they are processed, generated tokens where they are generated.

use crate::metrics::joules_per_token;

crate::names::names! {
    /// The phase a serving job's GPUs run. The names are the API's and the database's
    /// (migration 0035's CHECK).
    pub enum Phase {
        /// Prompt processing only: the pool's prompt tokens count, its generated ones do not.
        Prefill = "prefill",
        /// Generation only: the pool's generated tokens count, the prompts it was handed do not.
        Decode = "decode",
        /// Both phases on the same GPUs (serving that is not disaggregated).
        Both = "both",
    }
}

impl Phase {
    /// The prompt and generated tokens a pool of this phase processed, of those its server
    /// counted.
    pub fn processed(self, prompt: i64, generated: i64) -> (i64, i64) {
        match self {
            Phase::Prefill => (prompt, 0),
            Phase::Decode => (0, generated),
            Phase::Both => (prompt, generated),
        }
    }

    /// J per prompt token and J per generated token of energy spent in this phase: a prefill
    /// pool's energy buys its prompt tokens, a decode pool's its generated tokens. Energy
    /// of both phases on the same GPUs cannot be told apart: neither figure.
    pub fn joules_per_token(
        self,
        mj: i64,
        prompt: i64,
        generated: i64,
    ) -> (Option<rust_decimal::Decimal>, Option<rust_decimal::Decimal>) {
        match self {
            Phase::Prefill => (joules_per_token(mj, prompt), None),
            Phase::Decode => (None, joules_per_token(mj, generated)),
            Phase::Both => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    #[test]
    fn a_pool_counts_the_tokens_of_its_phase() {
        assert_eq!(Phase::Prefill.processed(1000, 10), (1000, 0));
        assert_eq!(Phase::Decode.processed(1000, 10), (0, 10));
        assert_eq!(Phase::Both.processed(1000, 10), (1000, 10));
    }

    #[test]
    fn each_phase_prices_its_own_tokens() {
        // 3,600 J over 1,200 prompt tokens: 3 J each.
        assert_eq!(
            Phase::Prefill.joules_per_token(3_600_000, 1200, 0),
            (Some(Decimal::from(3)), None)
        );
        assert_eq!(
            Phase::Decode.joules_per_token(3_600_000, 0, 400),
            (None, Some(Decimal::from(9)))
        );
        assert_eq!(
            Phase::Both.joules_per_token(3_600_000, 1200, 400),
            (None, None)
        );
        assert_eq!(
            Phase::Decode.joules_per_token(3_600_000, 0, 0),
            (None, None)
        );
    }

    #[test]
    fn names_read_back() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
        assert_eq!(Phase::parse("Prefill"), None);
    }
}
