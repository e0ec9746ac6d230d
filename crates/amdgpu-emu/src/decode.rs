//! Instruction decoding: placeholder until the format tables land.
