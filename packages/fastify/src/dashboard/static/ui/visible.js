// @ts-check
/**
 * `text` with its bidirectional marks, embeddings, overrides and isolates written as `\u202e` and
 * the like: a name, an error or a payload cannot make the page show its text reordered (the CLI
 * writes them the same way).
 * @param {string} text
 */
export function visible(text) {
  return text.replace(
    /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
