// Markdown rendering of assistant replies (and only of them: prompts,
// commands, tool output and errors stay plain text).
//
// marked turns the reply into HTML; raw HTML in the Markdown is not passed
// through but shown as text (the html renderer escapes it); DOMPurify then
// sanitizes the result, so that nothing a model writes can run script or
// load anything but what plain Markdown makes: no <script>, no event
// handler attributes, no javascript: links (the page's CSP forbids inline
// script as well; this is the first line, not the only one). Links open in
// a new tab with rel="noopener noreferrer". Every <pre> gets a copy button
// (data-testid="copy-code") whose label is drawn by CSS, so that the
// message's textContent stays the reply's text.
//
// A fenced code block that names one of the languages below is highlighted
// by highlight.js (no auto-detection: a block without a known language stays
// plain). Its output is HTML too and goes through DOMPurify with the rest;
// a class attribute survives only on a <span> and only with the classes
// highlight.js emits, and on a <code> only hljs and language-*.
//
// The vendored files come from scripts/vendor-markdown.sh and
// scripts/vendor-highlight.sh.

import { Marked } from '../vendor/markdown/marked.esm.js';
import DOMPurify from '../vendor/markdown/purify.es.mjs';
import hljs from '../vendor/highlight/core.js';
import bash from '../vendor/highlight/languages/bash.min.js';
import c from '../vendor/highlight/languages/c.min.js';
import cpp from '../vendor/highlight/languages/cpp.min.js';
import css from '../vendor/highlight/languages/css.min.js';
import diff from '../vendor/highlight/languages/diff.min.js';
import dockerfile from '../vendor/highlight/languages/dockerfile.min.js';
import go from '../vendor/highlight/languages/go.min.js';
import java from '../vendor/highlight/languages/java.min.js';
import javascript from '../vendor/highlight/languages/javascript.min.js';
import json from '../vendor/highlight/languages/json.min.js';
import markdown from '../vendor/highlight/languages/markdown.min.js';
import python from '../vendor/highlight/languages/python.min.js';
import rust from '../vendor/highlight/languages/rust.min.js';
import shell from '../vendor/highlight/languages/shell.min.js';
import sql from '../vendor/highlight/languages/sql.min.js';
import typescript from '../vendor/highlight/languages/typescript.min.js';
import xml from '../vendor/highlight/languages/xml.min.js';
import yaml from '../vendor/highlight/languages/yaml.min.js';

// The languages' own aliases come with them (js, ts, py, sh, yml, html, ...).
for (const [name, lang] of Object.entries({ bash, c, cpp, css, diff, dockerfile, go, java, javascript, json, markdown, python, rust, shell, sql, typescript, xml, yaml })) {
	hljs.registerLanguage(name, lang);
}

const escapeHTML = (s) =>
	String(s ?? '')
		.replace(/&/g, '&amp;')
		.replace(/</g, '&lt;')
		.replace(/>/g, '&gt;')
		.replace(/"/g, '&quot;')
		.replace(/'/g, '&#39;');

const marked = new Marked({
	gfm: true,
	breaks: false,
	async: false,
	renderer: {
		// Raw HTML (a block or an inline tag) is text, never markup.
		html(token) {
			return escapeHTML(token.text);
		},
		// A fenced block in a known language: highlighted. Anything else
		// (no language, an unknown one): false, marked's own renderer.
		code(token) {
			const lang = String(token.lang ?? '').trim().split(/\s+/)[0].toLowerCase();
			if (!lang || !hljs.getLanguage(lang)) return false;
			let html;
			try {
				html = hljs.highlight(String(token.text ?? '').replace(/\n$/, ''), { language: lang, ignoreIllegals: true }).value;
			} catch (err) {
				console.warn('dashgate: highlight', err);
				return false;
			}
			return `<pre><code class="hljs language-${escapeHTML(lang)}">${html}\n</code></pre>\n`;
		},
	},
});

// The classes highlight.js puts on its spans: hljs-<scope>, the tiers of a
// dotted scope (function_, inherited__) and language-<name> of a nested
// language; on <code>, hljs and language-<name>.
const SPAN_CLASS = /^(hljs-[a-z0-9_-]+|[a-z0-9]+_+|language-[a-z0-9_+#-]+)$/;
const CODE_CLASS = /^(hljs|language-[a-z0-9_+#-]+)$/;

const PURIFY = {
	USE_PROFILES: { html: true },
	FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'object', 'embed', 'svg', 'math'],
	FORBID_ATTR: ['style', 'id', 'name', 'srcset'],
	ALLOW_DATA_ATTR: false,
	RETURN_DOM_FRAGMENT: true,
};

// Links: a new tab, no opener, no referrer. The hook runs after DOMPurify
// dropped what it does not allow (a javascript: href is gone by then).
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
	if (node.hasAttribute?.('class')) {
		const allowed = node.nodeName === 'SPAN' ? SPAN_CLASS : node.nodeName === 'CODE' ? CODE_CLASS : null;
		const keep = allowed ? node.getAttribute('class').split(/\s+/).filter((c) => allowed.test(c)) : [];
		if (keep.length) node.setAttribute('class', keep.join(' '));
		else node.removeAttribute('class');
	}
	if (node.nodeName === 'A') {
		if (node.hasAttribute('href')) {
			node.setAttribute('target', '_blank');
			node.setAttribute('rel', 'noopener noreferrer');
		} else {
			node.removeAttribute('target');
		}
	}
});

/**
 * Sanitizes HTML the way a reply's is (the last step of renderMarkdown).
 * @param {string} html
 * @returns {DocumentFragment}
 */
export function sanitize(html) {
	return DOMPurify.sanitize(html, PURIFY);
}

/**
 * Renders Markdown text into el (replacing its children), sanitized.
 * @param {HTMLElement} el
 * @param {string} text
 */
export function renderMarkdown(el, text) {
	let frag;
	try {
		frag = sanitize(marked.parse(String(text ?? '')));
	} catch (err) {
		console.warn('dashgate: markdown', err);
		el.textContent = text ?? '';
		return;
	}
	// marked ends blocks with newlines; drop the outer ones so that the
	// message reads as its text.
	while (frag.firstChild?.nodeType === Node.TEXT_NODE && !frag.firstChild.data.trim()) frag.firstChild.remove();
	while (frag.lastChild?.nodeType === Node.TEXT_NODE && !frag.lastChild.data.trim()) frag.lastChild.remove();
	for (const pre of frag.querySelectorAll('pre')) addCopyButton(pre);
	el.replaceChildren(frag);
}

function addCopyButton(pre) {
	const wrap = document.createElement('div');
	wrap.className = 'code-block';
	const b = document.createElement('button');
	b.type = 'button';
	b.className = 'copy-code';
	b.dataset.testid = 'copy-code';
	b.title = 'Copy code';
	b.setAttribute('aria-label', 'Copy code');
	// A long line scrolls the block sideways: keyboard users reach it too.
	pre.tabIndex = 0;
	pre.replaceWith(wrap);
	wrap.append(b, pre);
}

// One listener for every copy button of the page.
document.addEventListener('click', (ev) => {
	const b = ev.target instanceof Element ? ev.target.closest('[data-testid="copy-code"]') : null;
	if (!b) return;
	const code = b.parentElement?.querySelector('pre')?.textContent ?? '';
	copyText(code).then(
		(ok) => flash(b, ok ? 'copied' : 'failed'),
		() => flash(b, 'failed'),
	);
});

/** Copies text to the clipboard (or a scratch textarea); resolves to whether it worked. */
export async function copyText(text) {
	if (navigator.clipboard && window.isSecureContext) {
		try {
			await navigator.clipboard.writeText(text);
			return true;
		} catch {
			// fall back below (no permission, page not focused)
		}
	}
	const ta = document.createElement('textarea');
	ta.value = text;
	ta.setAttribute('readonly', '');
	ta.className = 'copy-scratch';
	document.body.append(ta);
	ta.select();
	let ok = false;
	try {
		ok = document.execCommand('copy');
	} catch {
		ok = false;
	}
	ta.remove();
	return ok;
}

/** Marks button b with data-state (copied, failed) for a moment. */
export function flash(b, state) {
	b.dataset.state = state;
	clearTimeout(b._flash);
	b._flash = setTimeout(() => delete b.dataset.state, 1500);
}
