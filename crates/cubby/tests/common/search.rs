//! The search backends' fakes: answers in the documented JSON shapes of the
//! Brave Search API and of SearXNG (`format=json`), for a
//! [`super::http::Server`] to serve.

use serde_json::{Value, json};

/// Brave's documented answer shape, `web.results[]`.
pub fn brave_answer(results: &[(&str, &str, &str)]) -> Vec<u8> {
    let results: Vec<Value> = results
        .iter()
        .map(|(title, url, description)| {
            json!({
                "type": "search_result",
                "title": title,
                "url": url,
                "description": description,
                "is_source_local": false,
                "language": "en",
                "profile": {"name": "Site", "url": url},
            })
        })
        .collect();
    json!({
        "type": "search",
        "query": {"original": "q", "more_results_available": true},
        "mixed": {"type": "mixed", "main": []},
        "web": {"type": "search", "results": results, "family_friendly": true},
    })
    .to_string()
    .into_bytes()
}

/// SearXNG's `format=json` answer shape, `results[]`.
pub fn searxng_answer(results: &[(&str, &str, &str)]) -> Vec<u8> {
    let results: Vec<Value> = results
        .iter()
        .map(|(title, url, content)| {
            json!({
                "title": title,
                "url": url,
                "content": content,
                "engine": "duckduckgo",
                "engines": ["duckduckgo"],
                "score": 1.0,
                "category": "general",
            })
        })
        .collect();
    json!({
        "query": "q",
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": [],
    })
    .to_string()
    .into_bytes()
}
