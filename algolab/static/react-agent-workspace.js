/* The workspace goal box of the lab page: a goal in words on the runner operator's --workspace folder.
 *
 * It reads the page's runner URL and model inputs (#runner-url, #model-path, #model-device,
 * #model-dtype), queues POST /agent/runs {model, goal}, follows the run by polling (after_seq), shows
 * its timeline and each approval question with 批准/拒绝, and once the run has finished the files it
 * changed, their unified diff (GET /agent/runs/{id}/changes) and a 撤销更改 button
 * (POST /agent/runs/{id}/revert, refused by the runner when a file changed since). Everything the
 * runner returns is shown as text (textContent), never as markup. The folder itself is the operator's:
 * no field here names one.
 */
(function () {
  'use strict';

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function runnerBase() {
    const raw = (($('runner-url') || {}).value || '').trim();
    try {
      const url = new URL(raw);
      if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return null;
      return url.origin;
    } catch (e) {
      return null;
    }
  }

  function modelBody() {
    const path = (($('model-path') || {}).value || '').trim();
    return { model_path: path, device: ($('model-device') || {}).value || 'auto',
      dtype: ($('model-dtype') || {}).value || 'auto' };
  }

  async function call(base, path, body, token) {
    const init = { method: body === undefined ? 'GET' : 'POST', cache: 'no-store', credentials: 'omit', mode: 'cors',
      referrerPolicy: 'no-referrer', headers: {} };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    // Only the approval calls carry the operator token (react-agent.js keeps it for this runner).
    if (token) init.headers.Authorization = 'Bearer ' + token;
    try {
      const response = await fetch(base + path, init);
      let data = null;
      try { data = await response.json(); } catch (e) { data = null; }
      return { ok: response.ok, status: response.status, data };
    } catch (e) {
      return { ok: false, status: 0, data: { error: { code: 'runner_unreachable', message: 'runner not reachable' } } };
    }
  }

  function errorText(result) {
    const err = (result.data && result.data.error) || {};
    return (err.code || ('HTTP ' + result.status)) + (err.message ? '：' + err.message : '');
  }

  function build() {
    const anchor = $('panel-task');
    if (!anchor || $('panel-goal')) return;
    const panel = el('div', { class: 'panel', id: 'panel-goal' });
    panel.append(el('h3', {}, '目标：在 Runner 的工作区里改代码'));
    panel.append(el('p', { class: 'small muted' },
      '用一句话描述问题（例如“导入器丢掉了备注里的引号，测试失败；不要改测试”）。Runner 在操作者用 --workspace 指定的文件夹里找到测试命令、失败的测试和它们指向的代码。'));
    const text = el('textarea', { id: 'goal-text', rows: '3', spellcheck: 'false' });
    panel.append(text);
    const row = el('div', { class: 'row' });
    row.append(el('button', { type: 'button', id: 'goal-start', class: 'primary' }, '在工作区运行目标'));
    panel.append(row);
    panel.append(el('div', { id: 'goal-status', class: 'state-line', 'aria-live': 'polite' }, '未运行'));
    panel.append(el('ol', { id: 'goal-events', class: 'small mono' }));
    const ask = el('div', { id: 'goal-approval', class: 'approval', hidden: '' });
    ask.append(el('div', { id: 'goal-approval-command', class: 'mono' }));
    ask.append(el('div', { id: 'goal-approval-reason', class: 'small muted' }));
    ask.append(el('button', { type: 'button', id: 'goal-approve', class: 'primary' }, '批准'));
    ask.append(el('button', { type: 'button', id: 'goal-deny' }, '拒绝'));
    panel.append(ask);
    panel.append(el('div', { id: 'goal-files', class: 'small' }));
    panel.append(el('pre', { id: 'goal-diff', class: 'json', hidden: '' }));
    panel.append(el('button', { type: 'button', id: 'goal-revert', disabled: '' }, '撤销更改'));
    panel.append(el('div', { id: 'goal-revert-result', class: 'small', 'aria-live': 'polite' }));
    anchor.after(panel);
    $('goal-start').addEventListener('click', start);
    $('goal-revert').addEventListener('click', revert);
    $('goal-approve').addEventListener('click', () => answer('approve'));
    $('goal-deny').addEventListener('click', () => answer('deny'));
  }

  const state = { base: null, runId: null, seq: 0, question: null, answered: new Set() };

  function describe(event) {
    if (event.type === 'tool.started') return '▶ ' + event.tool + (event.arguments && event.arguments.path ? ' ' + event.arguments.path : '')
      + (event.arguments && event.arguments.command ? ' $ ' + event.arguments.command : '');
    if (event.type === 'tool.observation') return (event.observation && event.observation.ok ? '✓ ' : '✗ ') + (event.observation ? event.observation.tool : '');
    if (event.type === 'final.validated') return '✓ final';
    if (event.type === 'run.finished') return '■ ' + event.status + ' / ' + event.stop_reason;
    if (event.type === 'approval.requested') return '? ' + event.command;
    return null;
  }

  async function start() {
    const base = runnerBase();
    const goal = $('goal-text').value.trim();
    if (!base) { $('goal-status').textContent = '先填写本机 Runner 地址'; return; }
    if (!goal) { $('goal-status').textContent = '先写下目标'; return; }
    Object.assign(state, { base, runId: null, seq: 0, question: null, answered: new Set() });
    $('goal-events').textContent = '';
    $('goal-files').textContent = '';
    $('goal-diff').hidden = true;
    $('goal-revert').disabled = true;
    $('goal-revert-result').textContent = '';
    const created = await call(base, '/agent/runs', { ...modelBody(), goal });
    if (!created.ok) { $('goal-status').textContent = '被拒绝：' + errorText(created); return; }
    state.runId = created.data.id;
    $('goal-status').textContent = '运行中 ' + state.runId;
    poll();
  }

  async function poll() {
    const runId = state.runId;
    const view = await call(state.base, '/agent/runs/' + encodeURIComponent(runId) + '?after_seq=' + state.seq);
    if (runId !== state.runId) return;
    if (!view.ok) { $('goal-status').textContent = errorText(view); return; }
    for (const event of view.data.events || []) {
      state.seq = Math.max(state.seq, event.seq || 0);
      const line = describe(event);
      if (line) $('goal-events').append(el('li', {}, line));
      if (event.type === 'approval.requested') await askOperator();
    }
    if (view.data.terminal) {
      $('goal-approval').hidden = true;
      $('goal-status').textContent = view.data.status + ' / ' + view.data.stop_reason
        + (view.data.error ? '（' + view.data.error.code + '）' : '');
      showChanges();
      return;
    }
    setTimeout(poll, 300);
  }

  function token() {
    const page = window.ReactAgentPage;
    return page && page.operatorToken ? page.operatorToken(state.base) : null;
  }

  // The trace names no approval id: the question is read from the runner with the operator token.
  async function askOperator() {
    const pending = await call(state.base, '/agent/runs/' + encodeURIComponent(state.runId) + '/approvals',
      undefined, token());
    if (!pending.ok) { $('goal-status').textContent = errorText(pending); return; }
    const list = Array.isArray(pending.data) ? pending.data : (pending.data.approvals || pending.data.pending || []);
    const open = list.find((q) => !state.answered.has(q.approval_id));
    if (open) showQuestion(open);
  }

  function showQuestion(event) {
    state.question = event.approval_id;
    $('goal-approval-command').textContent = event.command || '';
    $('goal-approval-reason').textContent = (event.level || '') + ' — ' + (event.reason || '');
    $('goal-approval').hidden = false;
  }

  async function answer(decision) {
    const id = state.question;
    if (!id) return;
    state.answered.add(id);
    state.question = null;
    $('goal-approval').hidden = true;
    await call(state.base, '/agent/runs/' + encodeURIComponent(state.runId) + '/approvals/' + encodeURIComponent(id),
      { decision }, token());
  }

  async function showChanges() {
    const found = await call(state.base, '/agent/runs/' + encodeURIComponent(state.runId) + '/changes');
    if (!found.ok) { $('goal-files').textContent = errorText(found); return; }
    const changes = found.data.changes || { files: [], diff: '' };
    const files = changes.files || [];
    $('goal-files').textContent = files.length
      ? '改动的文件：' + files.map((f) => f.path + '（' + f.kind + '）').join('，') : '没有改动文件';
    if (found.data.discovery && found.data.discovery.tests_pass_before) {
      $('goal-files').textContent += '。改动前测试已通过：没有测试检查这个目标。';
    }
    $('goal-diff').textContent = changes.diff || '';
    $('goal-diff').hidden = !changes.diff;
    $('goal-revert').disabled = !files.length || changes.reverted;
  }

  async function revert() {
    const result = await call(state.base, '/agent/runs/' + encodeURIComponent(state.runId) + '/revert', {});
    if (result.ok) {
      $('goal-revert-result').textContent = '已撤销：' + (result.data.reverted || []).join('，');
      $('goal-revert').disabled = true;
    } else {
      $('goal-revert-result').textContent = '未撤销：' + errorText(result);
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', build);
  else build();
  window.ReactAgentGoal = { build, describe };
}());
