// Updates a part of the page in place to match a freshly built one, with
// the vendored morphdom: nodes that did not change are kept, a changed one
// is updated where it stands, and list items are matched by their key (the
// id, else data-testid with data-session-id, data-seq and data-pid), not by
// position.
// A button under the pointer or holding the keyboard focus stays the same
// node across a refresh, and a <details> a person opened stays open.
import morphdom from '../vendor/morphdom/morphdom-esm.js';

function nodeKey(node) {
	if (node.nodeType !== Node.ELEMENT_NODE) return undefined;
	if (node.id) return node.id;
	const d = node.dataset;
	if (d?.sessionId || d?.pid) return `${d.testid ?? ''}:${d.sessionId ?? ''}:${d.seq ?? ''}:${d.pid ?? ''}`;
	return undefined;
}

const options = {
	getNodeKey: nodeKey,
	onBeforeElUpdated(from, to) {
		if (from.isEqualNode(to)) return false;
		if (from instanceof HTMLDetailsElement) to.open = from.open;
		return true;
	},
};

/** Makes el (kept) look like fresh (an element built for it, not in the page). */
export function morphInto(el, fresh) {
	morphdom(el, fresh, options);
}

/** Makes the children of parent (kept) those of the list nodes. */
export function morphChildren(parent, nodes) {
	const next = parent.cloneNode(false);
	next.append(...nodes);
	morphdom(parent, next, { ...options, childrenOnly: true });
}
