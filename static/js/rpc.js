// JSON-RPC 2.0 client for the chat socket (PROTOCOL.md §2).
//
// ChatClient owns one WebSocket at a time and reconnects it with backoff when
// it closes. Calls are accepted only between the server's gateway.ready event
// and the socket's close; calls still pending when the socket closes are
// rejected with an RpcError whose code is null.

import { Backoff, socketState } from './net.js';

export class RpcError extends Error {
	/**
	 * @param {number|null} code JSON-RPC error code, or null for a local failure
	 * @param {string} message
	 * @param {object|undefined} data the error's data member, if any
	 */
	constructor(code, message, data) {
		super(message);
		this.name = 'RpcError';
		this.code = code;
		this.data = data;
	}
}

export class ChatClient {
	#url;
	#handlers;
	#ws = null;
	#ready = false;
	#everReady = false;
	#nextId = 1;
	#pending = new Map(); // id -> {resolve, reject, method}
	#backoff = new Backoff();

	/**
	 * @param {string} url ws(s):// URL of the chat endpoint
	 * @param {{onReady?: (payload: object) => void,
	 *          onEvent?: (params: object) => void,
	 *          onStatus?: (status: 'connecting'|'connected'|'reconnecting') => void}} handlers
	 */
	constructor(url, handlers) {
		this.#url = url;
		this.#handlers = handlers;
	}

	start() {
		this.#connect();
	}

	/** True between gateway.ready and the close of that socket. */
	get ready() {
		return this.#ready;
	}

	/** State of the current socket: "connecting" | "open" | "closing" | "closed". */
	state() {
		return socketState(this.#ws);
	}

	/**
	 * Sends a request and resolves with its result, or rejects with an RpcError.
	 * @param {string} method
	 * @param {object} [params]
	 */
	call(method, params) {
		const ws = this.#ws;
		if (!this.#ready || !ws || ws.readyState !== WebSocket.OPEN) {
			return Promise.reject(new RpcError(null, 'not connected'));
		}
		const id = this.#nextId++;
		const req = { jsonrpc: '2.0', id, method };
		if (params !== undefined) req.params = params;
		return new Promise((resolve, reject) => {
			this.#pending.set(id, { resolve, reject, method });
			try {
				ws.send(JSON.stringify(req));
			} catch (err) {
				this.#pending.delete(id);
				reject(new RpcError(null, `send ${method}: ${err.message}`));
			}
		});
	}

	#connect() {
		this.#emitStatus(this.#everReady ? 'reconnecting' : 'connecting');
		const ws = new WebSocket(this.#url);
		this.#ws = ws;
		ws.addEventListener('message', (ev) => {
			if (this.#ws === ws) this.#onMessage(ev.data);
		});
		ws.addEventListener('close', () => {
			if (this.#ws !== ws) return;
			this.#onClose();
		});
	}

	#onClose() {
		this.#ready = false;
		const pending = this.#pending;
		this.#pending = new Map();
		for (const { reject, method } of pending.values()) {
			reject(new RpcError(null, `connection lost before the reply to ${method}`));
		}
		if (this.#everReady) this.#emitStatus('reconnecting');
		const delay = this.#backoff.next();
		setTimeout(() => this.#connect(), delay);
	}

	#onMessage(data) {
		if (typeof data !== 'string') {
			console.warn('dashgate: unexpected binary frame on the chat socket');
			return;
		}
		let msg;
		try {
			msg = JSON.parse(data);
		} catch (err) {
			console.warn('dashgate: bad JSON on the chat socket', err);
			return;
		}
		if (msg === null || typeof msg !== 'object') return;

		if (msg.method === 'event') {
			const params = msg.params ?? {};
			if (params.type === 'gateway.ready') {
				this.#ready = true;
				this.#everReady = true;
				this.#backoff.reset();
				this.#emitStatus('connected');
				this.#handlers.onReady?.(params.payload ?? {});
			} else {
				this.#handlers.onEvent?.(params);
			}
			return;
		}

		if (!('id' in msg)) return;
		const call = this.#pending.get(msg.id);
		if (!call) {
			// Replies to nothing we sent, e.g. an error with id null.
			if (msg.error) console.warn('dashgate: rpc error', msg.error);
			return;
		}
		this.#pending.delete(msg.id);
		if (msg.error) {
			const e = msg.error;
			call.reject(new RpcError(e.code ?? null, e.message ?? 'error', e.data));
		} else {
			call.resolve(msg.result ?? {});
		}
	}

	#emitStatus(status) {
		this.#handlers.onStatus?.(status);
	}
}
