//! The pre-tokenizers of byte-pair GGUF files, by `tokenizer.ggml.pre`, as llama.cpp defines
//! them: for each name, the regular expressions that cut the text into words (applied in
//! order, each to the pieces the previous ones left; matches and the text between them both
//! stay), whether the words are then written in GPT-2's byte alphabet, and the flags the name
//! sets (a whole-word lookup before the merges, a beginning-of-sequence token by default).
//!
//! llama.cpp runs most expressions on a copy of the text where every character outside ASCII
//! stands for its category, so `\p{Lu}`, `\p{Ll}`, `\p{Lt}`, `\p{Lm}` and `\p{Lo}` all mean
//! "a letter" there; [`for_regex_engine`] writes them so. `\d` is ASCII there, as in its
//! regex engine. Its hand-written splitters (`\p{AFMoE_digits}`, the newline splitter) are
//! written here as the expressions they implement.

/// One pre-tokenizer: the expressions and flags of a family of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTokenizer {
    /// The family (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`, lower case).
    pub family: &'static str,
    /// The expressions, applied in order.
    pub regexes: &'static [&'static str],
    /// Words are written in GPT-2's byte alphabet before the merges (false: raw UTF-8, spaces
    /// as `▁`, bytes outside the vocabulary as `<0xXX>`).
    pub byte_level: bool,
    /// A word that is a token of the vocabulary is that token, whatever the merges say.
    pub ignore_merges: bool,
    /// A beginning-of-sequence token is added unless the file says otherwise.
    pub add_bos: bool,
}

/// GPT-2's pattern (contractions, letters, digits, other runs, trailing spaces).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern (digits in threes, a newline run kept whole).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's pattern: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Lines and runs of newlines (llama.cpp's newline splitter).
const LINES: &str = r"[^\n]+|[\n]+";
/// Digit runs cut into threes from the right (llama.cpp's `\p{AFMoE_digits}` splitter).
const DIGITS_FROM_RIGHT: &str = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?:\P{N}|$))";
/// GPT-4o's pattern as llama.cpp writes it (upper/lower-case runs through lookaheads).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CASED_WORDS: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

impl PreTokenizer {
    /// Spaces are written as `▁` before the merges (SentencePiece-style vocabularies).
    pub fn spaces_as_boundary(&self) -> bool {
        !self.byte_level && self.family != "whitespace"
    }
}

/// Shorthand for a table row.
const fn pre(
    family: &'static str,
    regexes: &'static [&'static str],
    byte_level: bool,
    ignore_merges: bool,
    add_bos: bool,
) -> PreTokenizer {
    PreTokenizer {
        family,
        regexes,
        byte_level,
        ignore_merges,
        add_bos,
    }
}

const DEFAULT: PreTokenizer = pre(
    "default",
    &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    true,
    false,
    false,
);

/// Every `tokenizer.ggml.pre` name llama.cpp knows, with its pre-tokenizer.
pub const NAMES: &[(&[&str], PreTokenizer)] = &[
    (&["default"], DEFAULT),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        pre("llama3", &[LLAMA3], true, true, true),
    ),
    (&["dbrx"], pre("dbrx", &[LLAMA3], true, false, false)),
    (&["smaug-bpe"], pre("smaug", &[LLAMA3], true, false, false)),
    (
        &["jais-2"],
        pre(
            "jais2",
            &[
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["deepseek-llm"],
        pre(
            "deepseek-llm",
            &[
                "[\r\n]",
                r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                r"\s+$",
                r"[一-龥ࠀ-一가-퟿]+",
                r"\p{N}+",
            ],
            true,
            true,
            true,
        ),
    ),
    (
        &["deepseek-v3"],
        pre(
            "deepseek3-llm",
            &[r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3],
            true,
            true,
            true,
        ),
    ),
    (
        &["hunyuan-dense"],
        pre(
            "hunyuan-dense",
            &[r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3],
            true,
            false,
            false,
        ),
    ),
    (
        &["hy_v4"],
        pre(
            "hy-v4",
            &[r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3],
            true,
            false,
            false,
        ),
    ),
    (
        &["joyai-llm"],
        pre(
            "joyai-llm",
            &[r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3],
            true,
            false,
            false,
        ),
    ),
    (
        &["spark2_5"],
        pre(
            "spark2-5",
            &[
                r"\p{N}{1,3}",
                r"[一-龥぀-ゟ゠-ヿ]+",
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
                r"\p{N}",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["youtu"],
        pre(
            "youtu",
            &[
                r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["deepseek-coder"],
        pre(
            "deepseek-coder",
            &[
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                r"[一-龥ࠀ-一가-퟿]+",
                r"\p{N}",
            ],
            true,
            false,
            true,
        ),
    ),
    (
        &["falcon"],
        pre(
            "falcon",
            &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
            true,
            false,
            false,
        ),
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        pre("starcoder", &[r"\p{N}", GPT2], true, false, false),
    ),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        pre("gpt2", &[GPT2], true, false, false),
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        pre("qwen2", &[QWEN2], true, false, false),
    ),
    (
        &["qwen35"],
        pre(
            "qwen35",
            &[
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["poro-chat", "bloom", "gpt3-finnish"],
        pre("bloom", &[BLOOM], true, false, false),
    ),
    (
        &["viking"],
        pre("viking", &[BLOOM, r"\p{N}"], true, false, false),
    ),
    (
        &["chatglm-bpe"],
        pre("chatglm4", &[LLAMA3], true, false, false),
    ),
    (
        &["glm4", "glm5"],
        pre("chatglm4", &[LLAMA3], true, true, false),
    ),
    (
        &["tekken"],
        pre(
            "tekken",
            &[
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            true,
            true,
        ),
    ),
    (
        &["chameleon"],
        pre(
            "chameleon",
            &[
                r"<sentinel:[0-9]+>",
                r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                r"([\t\n]|    |  )",
                r"\p{N}",
                r"[\p{P}!-/:-@\[-`{-~]",
                GPT2,
            ],
            true,
            false,
            true,
        ),
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie"],
        pre("gpt4o", &[GPT4O], true, false, false),
    ),
    (
        &["minimax-m2"],
        pre("minimax-m2", &[GPT4O], true, false, false),
    ),
    (
        &["granite-embed-multi-97m"],
        pre(
            "granite-emb-multi",
            &[
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            true,
            false,
        ),
    ),
    (
        &["tiny_aya", "cohere2moe"],
        pre(
            "tiny-aya",
            &[DIGITS_FROM_RIGHT, CASED_WORDS],
            true,
            false,
            false,
        ),
    ),
    (
        &["superbpe"],
        pre(
            "superbpe",
            &[r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
            true,
            false,
            false,
        ),
    ),
    (
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        pre(
            "bailingmoe",
            &[
                r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["seed-coder"],
        pre(
            "seed-coder",
            &[
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["ufakzeka"],
        pre(
            "ufakzeka",
            &[r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
            true,
            false,
            false,
        ),
    ),
    (
        &["afmoe"],
        pre(
            "afmoe",
            &[
                DIGITS_FROM_RIGHT,
                r"[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
                DEEPSEEK3,
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["laguna"],
        pre("laguna", &[LINES, QWEN2], true, false, false),
    ),
    (
        &["exaone-moe"],
        pre(
            "exaone-moe",
            &[
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
    (
        &["gemma4", "granite-embed-multi-311m"],
        pre("gemma4", &[LINES], false, false, true),
    ),
    (
        &["sarvam-moe"],
        pre("sarvam-moe", &[LINES], false, false, false),
    ),
    (
        &["minicpm5"],
        pre(
            "minicpm5",
            &[
                r"\p{N}{1,3}",
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            true,
            false,
        ),
    ),
    (
        &["whitespace"],
        pre("whitespace", &[r"\S+"], false, false, false),
    ),
    (
        &["kimi-k2"],
        pre(
            "kimi-k2",
            &[
                r"\p{Han}+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            true,
            false,
            false,
        ),
    ),
];

/// The pre-tokenizer of a `tokenizer.ggml.pre` name; a file without the key takes
/// llama.cpp's default. `None`: a name llama.cpp does not know.
pub fn by_name(name: Option<&str>) -> Option<PreTokenizer> {
    let Some(name) = name else {
        return Some(DEFAULT);
    };
    NAMES
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, pre)| *pre)
}

/// `regex` as llama.cpp's engine reads it: letter subcategories mean any letter (the
/// category copy of the text keeps only the major category), `\d` is ASCII.
/// Kimi-K2's expression is the exception: llama.cpp runs it by hand with real categories.
pub fn for_regex_engine(regex: &str) -> String {
    if regex.contains(r"\p{Han}") {
        return regex.to_string();
    }
    let mut out = regex.to_string();
    for sub in [r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}"] {
        out = out.replace(sub, r"\p{L}");
    }
    out.replace(r"\d", "[0-9]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_once_and_every_expression_compiles() {
        let mut seen = std::collections::HashSet::new();
        for (names, pre) in NAMES {
            for name in *names {
                assert!(seen.insert(*name), "{name} listed twice");
            }
            for regex in pre.regexes {
                let regex = for_regex_engine(regex);
                let split = tokenizers::pre_tokenizers::split::Split::new(
                    tokenizers::pre_tokenizers::split::SplitPattern::Regex(regex.clone()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                );
                if let Err(e) = split {
                    panic!("{}: {regex}: {e}", pre.family);
                }
            }
        }
        assert!(seen.len() > 90, "{} names", seen.len());
    }

    #[test]
    fn unknown_and_absent_names() {
        assert_eq!(by_name(None).map(|p| p.family), Some("default"));
        assert_eq!(by_name(Some("llama-bpe")).map(|p| p.family), Some("llama3"));
        assert!(by_name(Some("no-such-pre")).is_none());
    }
}
