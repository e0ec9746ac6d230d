//! End-to-end checks of Candle's rocm feature (tests/).
