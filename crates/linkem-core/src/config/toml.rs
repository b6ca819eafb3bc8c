//! Link words from a TOML file: keys are the words, values their arguments.

/// Link words read from a TOML file: keys are the words, values their
/// arguments. Tables `a-to-b` and `b-to-a` hold words for one direction only.
///
/// ```toml
/// rate = "10mbit"
/// delay = "20ms 2ms 25%"
/// loss = "gemodel 1% 30%"
/// queue = 100
/// seed = 7
/// [b-to-a]
/// rate = "1mbit"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TomlWords {
    pub both: Vec<String>,
    pub a_to_b: Vec<String>,
    pub b_to_a: Vec<String>,
}

impl TomlWords {
    pub fn parse(text: &str) -> Result<TomlWords, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| e.to_string().trim_end().to_string())?;
        let mut out = TomlWords::default();
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("a-to-b" | "b-to-a", toml::Value::Table(t)) => {
                    let mut words = Vec::new();
                    for (k, v) in t {
                        push_words(&mut words, &format!("{key}.{k}"), k, v)?;
                    }
                    if key == "a-to-b" {
                        out.a_to_b = words;
                    } else {
                        out.b_to_a = words;
                    }
                }
                _ => push_words(&mut out.both, key, key, value)?,
            }
        }
        Ok(out)
    }
}

fn push_words(
    words: &mut Vec<String>,
    path: &str,
    key: &str,
    value: &toml::Value,
) -> Result<(), String> {
    words.push(key.to_string());
    match value {
        toml::Value::String(s) => {
            if s.split_whitespace().next().is_none() {
                return Err(format!("key '{path}': empty value"));
            }
            words.extend(s.split_whitespace().map(str::to_string));
        }
        toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
        toml::Value::Float(x) if *x >= 0.0 => words.push(x.to_string()),
        toml::Value::Array(items) => {
            for item in items {
                match item {
                    toml::Value::String(s) => {
                        words.extend(s.split_whitespace().map(str::to_string))
                    }
                    toml::Value::Integer(i) if *i >= 0 => words.push(i.to_string()),
                    _ => {
                        return Err(format!(
                            "key '{path}': array items are strings or whole numbers"
                        ))
                    }
                }
            }
        }
        _ => {
            return Err(format!(
                "key '{path}': expected a string such as \"10ms\", a number or an array, found {}",
                value.type_str()
            ))
        }
    }
    Ok(())
}
