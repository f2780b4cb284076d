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
// The vendored files come from scripts/vendor-markdown.sh.

import { Marked } from '../vendor/markdown/marked.esm.js';
import DOMPurify from '../vendor/markdown/purify.es.mjs';

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
	},
});

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
 * Renders Markdown text into el (replacing its children), sanitized.
 * @param {HTMLElement} el
 * @param {string} text
 */
export function renderMarkdown(el, text) {
	let frag;
	try {
		frag = DOMPurify.sanitize(marked.parse(String(text ?? '')), PURIFY);
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

async function copyText(text) {
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

function flash(b, state) {
	b.dataset.state = state;
	clearTimeout(b._flash);
	b._flash = setTimeout(() => delete b.dataset.state, 1500);
}
