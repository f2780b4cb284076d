// Refreshes the admin page's body every 2 s without a full reload: the
// server renders the same templ component (?fragment=1) and it replaces the
// old one; the window's scroll position is kept. Without JavaScript the page
// still works: its forms post and the server answers 303 back to /admin.
const base = document.body.dataset.basePath || '/';
const everyMs = 2000;

async function refresh() {
  const body = document.getElementById('admin-body');
  if (!body || document.hidden) return;
  try {
    const res = await fetch(base + 'admin?fragment=1', { credentials: 'same-origin', cache: 'no-store' });
    if (!res.ok) return;
    const html = await res.text();
    const tpl = document.createElement('template');
    tpl.innerHTML = html.trim();
    const fresh = tpl.content.firstElementChild;
    if (!fresh) return;
    const x = window.scrollX, y = window.scrollY;
    body.replaceWith(fresh);
    window.scrollTo(x, y);
  } catch (e) {
    console.warn('admin refresh failed', e);
  }
}

setInterval(refresh, everyMs);
