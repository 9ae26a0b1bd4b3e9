//! Ranked full-text search over a description's operations: BM25 over field-weighted terms.
//!
//! The index is built once, when the generation derives its operations, and stored with the
//! version; serving loads it with the operations on first use. A compact implementation rather
//! than a search engine crate: an index of a few thousand short documents is a map of term
//! counts, and storing it as JSON keeps it in the catalog beside the operations it ranks.
//!
//! Terms are lowercased words split at punctuation and camelCase, with a light suffix stemmer
//! (`repositories` and `repository` meet) and a few synonyms folded into one word (`remove` is
//! `delete`, `add` is `create`), applied alike to documents and queries. Each document also
//! carries the verbs its HTTP method stands for, so "delete a webhook" finds `DELETE /hooks/{id}`
//! whatever its summary says.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// What one operation is searched by.
pub struct SearchDocument<'a> {
    pub operation: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub summary: Option<&'a str>,
    pub description: Option<&'a str>,
    pub tags: &'a [String],
    pub parameters: Vec<&'a str>,
}

/// Field weights: a word in the operation's name or summary says more about it than one deep in
/// its description.
const OPERATION_WEIGHT: f32 = 3.0;
const SUMMARY_WEIGHT: f32 = 3.0;
const PATH_WEIGHT: f32 = 2.0;
const TAG_WEIGHT: f32 = 1.5;
const METHOD_WEIGHT: f32 = 1.5;
const PARAMETER_WEIGHT: f32 = 0.5;
const DESCRIPTION_WEIGHT: f32 = 0.5;
/// Characters of a description indexed: the start says what the operation is; the rest is
/// mostly details that match every query a little.
const DESCRIPTION_CHARS: usize = 600;

/// The stored index: each document's weighted term counts and length, in operation order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SearchIndex {
    documents: Vec<IndexedDocument>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct IndexedDocument {
    /// Weighted count of each term.
    terms: HashMap<String, f32>,
    /// Sum of the weights: the document's length for BM25.
    length: f32,
}

/// A search index ready to answer queries: the stored one plus document frequencies.
pub struct Searcher {
    index: SearchIndex,
    document_frequency: HashMap<String, u32>,
    average_length: f32,
}

impl SearchIndex {
    /// Indexes `documents`; a hit is reported by its position among them.
    pub fn build(documents: &[SearchDocument<'_>]) -> SearchIndex {
        let documents = documents
            .iter()
            .map(|document| {
                let mut terms: HashMap<String, f32> = HashMap::new();
                let mut add = |text: &str, weight: f32| {
                    for term in tokens(text) {
                        *terms.entry(term).or_default() += weight;
                    }
                };
                add(document.operation, OPERATION_WEIGHT);
                add(document.summary.unwrap_or(""), SUMMARY_WEIGHT);
                // A path's parameters (`{name}`) say what it takes, not what it does.
                for segment in document.path.split('/') {
                    let parameter = segment.starts_with('{') && segment.ends_with('}');
                    add(segment, if parameter { PARAMETER_WEIGHT } else { PATH_WEIGHT });
                }
                for tag in document.tags {
                    add(tag, TAG_WEIGHT);
                }
                add(method_verbs(document.method, document.path), METHOD_WEIGHT);
                for parameter in &document.parameters {
                    add(parameter, PARAMETER_WEIGHT);
                }
                let description: String = document.description.unwrap_or("").chars().take(DESCRIPTION_CHARS).collect();
                add(&description, DESCRIPTION_WEIGHT);
                let length = terms.values().sum();
                IndexedDocument { terms, length }
            })
            .collect();
        SearchIndex { documents }
    }

    pub fn len(&self) -> usize {
        self.documents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    /// Ready to search: document frequencies counted once.
    pub fn searcher(self) -> Searcher {
        let mut document_frequency: HashMap<String, u32> = HashMap::new();
        for document in &self.documents {
            for term in document.terms.keys() {
                *document_frequency.entry(term.clone()).or_default() += 1;
            }
        }
        let total: f32 = self.documents.iter().map(|d| d.length).sum();
        let average_length = if self.documents.is_empty() { 1.0 } else { total / self.documents.len() as f32 };
        Searcher { index: self, document_frequency, average_length }
    }
}

impl Searcher {
    /// The `limit` best documents for `query`, best first, as (position, score); documents that
    /// share no term with the query are left out. Ties keep document order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f32)> {
        let mut query_terms = tokens(query);
        query_terms.sort();
        query_terms.dedup();
        let count = self.index.documents.len() as f32;
        let mut scored: Vec<(usize, f32)> = self
            .index
            .documents
            .iter()
            .enumerate()
            .filter_map(|(position, document)| {
                let mut score = 0.0;
                for term in &query_terms {
                    let Some(&frequency) = document.terms.get(term) else { continue };
                    let containing = *self.document_frequency.get(term).unwrap_or(&0) as f32;
                    let idf = ((count - containing + 0.5) / (containing + 0.5) + 1.0).ln();
                    let norm = K1 * (1.0 - B + B * document.length / self.average_length);
                    score += idf * frequency * (K1 + 1.0) / (frequency + norm);
                }
                (score > 0.0).then_some((position, score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        scored
    }
}

/// The verbs a method stands for, in the words people use for them. A GET of a path that ends
/// at a collection lists it; one that ends at a parameter reads one item.
fn method_verbs(method: &str, path: &str) -> &'static str {
    let one_item = path.trim_end_matches('/').ends_with('}');
    match method {
        "GET" | "HEAD" if one_item => "get",
        "GET" | "HEAD" => "list get",
        "POST" => "create",
        "PUT" | "PATCH" => "update",
        "DELETE" => "delete",
        _ => "",
    }
}

/// Words that say nothing about which operation is meant.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "i", "in", "into", "is", "it", "its", "me",
    "my", "of", "on", "or", "our", "that", "the", "their", "this", "to", "via", "we", "what", "which", "with", "you",
    "your", "do", "does", "have", "has", "can", "want", "all", "some", "any", "given", "using", "about",
];

/// Words folded into one, so a query and a description that say the same thing differently meet.
fn synonym(word: &str) -> &str {
    match word {
        "remov" | "eras" | "destroy" | "drop" => "delet",
        "add" | "new" | "mak" | "make" | "register" => "creat",
        "edit" | "modify" | "modifi" | "chang" | "renam" | "set" => "updat",
        "fetch" | "retriev" | "show" | "read" | "look" | "find" | "view" | "info" | "detail" => "get",
        "enumerat" | "browse" => "list",
        "repo" => "repositori",
        "webhook" => "hook",
        // "How many" asks for a count.
        "mani" => "count",
        _ => word,
    }
}

/// The terms of `text`: words split at punctuation and camelCase, lowercased, stop words left
/// out, stemmed and folded.
pub fn tokens(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous_lower && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
        } else {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = false;
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words.into_iter().filter(|w| !STOP_WORDS.contains(&w.as_str())).map(|w| synonym(&stem(&w)).to_string()).collect()
}

/// A light suffix stemmer: plurals, `-ing`, `-ed` and a final `e`, so `created`, `creates` and
/// `create` are one term.
fn stem(word: &str) -> String {
    let mut stem = word.to_string();
    if stem.len() > 4 && stem.ends_with("ies") {
        stem.truncate(stem.len() - 3);
        stem.push('i');
    } else if stem.len() > 4 && (stem.ends_with("sses") || stem.ends_with("shes") || stem.ends_with("ches")) {
        stem.truncate(stem.len() - 2);
    } else if stem.len() > 3 && stem.ends_with('s') && !stem.ends_with("ss") && !stem.ends_with("us") {
        stem.pop();
    }
    if stem.len() > 5 && stem.ends_with("ing") {
        stem.truncate(stem.len() - 3);
    } else if stem.len() > 4 && stem.ends_with("ed") {
        stem.truncate(stem.len() - 2);
    }
    if stem.len() > 3 && stem.ends_with('e') {
        stem.pop();
    }
    if stem.ends_with('y') && stem.len() > 3 {
        stem.pop();
        stem.push('i');
    }
    stem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_meet_across_forms_and_synonyms() {
        assert_eq!(tokens("createRepository"), tokens("create repositories"));
        assert_eq!(tokens("Remove a webhook"), tokens("delete webhooks"));
        assert_eq!(tokens("/repos/{owner}/{repo}/issues"), ["repositori", "owner", "repositori", "issu"]);
        assert_eq!(tokens("the message"), tokens("messages"));
    }

    #[test]
    fn ranks_by_relevance_and_method() {
        let tags = vec!["pets".to_string()];
        let documents = [
            SearchDocument {
                operation: "listPets",
                method: "GET",
                path: "/pets",
                summary: Some("List all pets"),
                description: None,
                tags: &tags,
                parameters: vec!["limit"],
            },
            SearchDocument {
                operation: "deletePet",
                method: "DELETE",
                path: "/pets/{petId}",
                summary: None,
                description: None,
                tags: &tags,
                parameters: vec!["petId"],
            },
            SearchDocument {
                operation: "getWeather",
                method: "GET",
                path: "/weather",
                summary: Some("Today's weather"),
                description: Some("Temperature and rain"),
                tags: &[],
                parameters: vec![],
            },
        ];
        let index = SearchIndex::build(&documents);
        let stored: SearchIndex = serde_json::from_value(serde_json::to_value(&index).unwrap()).unwrap();
        let searcher = stored.searcher();
        assert_eq!(searcher.search("remove a pet", 5)[0].0, 1);
        assert_eq!(searcher.search("show me all the pets", 5)[0].0, 0);
        assert_eq!(searcher.search("is it snowing", 5).len(), 0, "no shared term, no hit");
        assert_eq!(searcher.search("temperature", 5)[0].0, 2);
        assert!(searcher.search("", 5).is_empty());
    }
}
