// @ts-check
// DOM helpers. Everything the dashboard shows is set as text or as attribute values, never
// parsed as HTML.

import { visible } from './visible.js';

/** @typedef {Node | string | null | undefined | false} Child */

/**
 * An element of the page by id, checked to be of the expected class.
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new (...args: never[]) => T} type
 * @returns {T}
 */
export function byId(id, type) {
  const node = document.getElementById(id);
  if (!(node instanceof type)) throw new Error(`the dashboard page has no ${type.name} #${id}`);
  return node;
}

/**
 * Sets attributes: `text` is the text content, `class` the class list; null, undefined and false
 * leave an attribute out, true sets it empty.
 * @param {Element} node
 * @param {Record<string, unknown>} attributes
 */
function setAttributes(node, attributes) {
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') node.textContent = visible(String(value));
    else if (name === 'class') node.setAttribute('class', String(value));
    else node.setAttribute(name, value === true ? '' : String(value));
  }
}

/** @param {Element} node @param {Child[]} children */
function append(node, children) {
  for (const child of children) {
    if (child !== undefined && child !== null && child !== false) node.append(child);
  }
}

/**
 * Creates an HTML element with attributes and children.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown>} [attributes]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attributes);
  append(node, children);
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Creates an SVG element with attributes and children.
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown>} [attributes]
 * @param {...Child} children
 * @returns {SVGElementTagNameMap[K]}
 */
export function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttributes(node, attributes);
  append(node, children);
  return node;
}

let uniqueId = 0;

/** A fresh id for an element (labels, descriptions). @param {string} prefix */
export function nextId(prefix) {
  uniqueId += 1;
  return `${prefix}-${uniqueId}`;
}

/** The nodes that are not null, for replaceChildren() (which would print null as text). @param {Child[]} nodes */
export function present(nodes) {
  /** @type {(Node | string)[]} */
  const out = [];
  for (const node of nodes) if (node !== undefined && node !== null && node !== false) out.push(node);
  return out;
}
