/* No.17 ReAct Agent lab page. Plain JS, no build step, nothing fetched from outside.
 *
 * Experiment 1 and 2 are concept cards (plus one real validation request to the runner);
 * experiment 3 talks only to a loopback runner chosen by the user and never shows a result that
 * did not come from it. Untrusted text (runner responses, package files) is always inserted with
 * textContent, never innerHTML.
 */
'use strict';

(function () {
  // ------------------------------------------------------------------------------------------
  // Small helpers
  // ------------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  /** el('div', {class: 'x', text: 'y'}, child...) -- builds DOM without parsing HTML. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = value;
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node, ...children) {
    node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  }

  const pretty = (value) => JSON.stringify(value, null, 2);
  const TEST_POLICY_LABEL = '测试策略 (scripted test policy) — 不是真实模型';

  // ------------------------------------------------------------------------------------------
  // Runner URL: loopback only (SPEC R-API, SECURITY "loopback-only runner URLs in the page")
  // ------------------------------------------------------------------------------------------

  const LOOPBACK_HOSTNAMES = new Set(['127.0.0.1', 'localhost', '[::1]']);

  /** Returns {ok, base, error}. Only http://127.0.0.1, http://localhost, http://[::1] (any port). */
  function normalizeRunnerUrl(raw) {
    const text = String(raw || '').trim();
    if (!text) return { ok: false, error: '请填写 Runner 地址' };
    let url;
    try {
      url = new URL(text);
    } catch (e) {
      return { ok: false, error: '不是有效的 URL' };
    }
    if (url.protocol !== 'http:') return { ok: false, error: '只允许 http:// 的本机地址' };
    if (!LOOPBACK_HOSTNAMES.has(url.hostname.toLowerCase())) {
      return { ok: false, error: '页面只连接本机 Runner：主机必须是 127.0.0.1、localhost 或 [::1]' };
    }
    if (url.username || url.password) return { ok: false, error: 'Runner 地址不能包含用户名或密码' };
    if ((url.pathname && url.pathname !== '/') || url.search || url.hash) {
      return { ok: false, error: '只填写协议、主机与端口，例如 http://127.0.0.1:4890' };
    }
    return { ok: true, base: url.origin };
  }

  /** Fetch JSON from the runner. Never throws: {ok, status, data, error, unreachable}. */
  async function runnerFetch(base, path, options) {
    const opts = options || {};
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), opts.timeoutMs || 15000);
    const init = { method: opts.method || 'GET', signal: controller.signal, cache: 'no-store',
      credentials: 'omit', mode: 'cors', referrerPolicy: 'no-referrer' };
    if (opts.body !== undefined) {
      init.headers = { 'Content-Type': 'application/json' };
      init.body = JSON.stringify(opts.body);
    }
    // The operator token (see the Approvals block) goes only where a caller passes it.
    if (opts.token) init.headers = { ...(init.headers || {}), Authorization: 'Bearer ' + opts.token };
    let response;
    try {
      response = await fetch(base + path, init);
    } catch (e) {
      clearTimeout(timer);
      return { ok: false, status: 0, unreachable: true,
        error: { code: 'runner_unreachable', message: 'runner not reachable（无法连接 ' + base + '）' } };
    }
    clearTimeout(timer);
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      data = null;
    }
    if (!response.ok) {
      const err = (data && data.error) || { code: 'http_' + response.status, message: 'HTTP ' + response.status };
      return { ok: false, status: response.status, data, error: err };
    }
    return { ok: true, status: response.status, data };
  }

  function currentRunner() {
    const parsed = normalizeRunnerUrl($('runner-url').value);
    return parsed.ok ? parsed.base : null;
  }

  /** Remove thought/reasoning/analysis keys at any depth (trace export, SPEC R-TR). */
  const HIDDEN_KEYS = new Set(['thought', 'thoughts', 'reasoning', 'analysis', 'chain_of_thought']);
  function stripHidden(value) {
    if (Array.isArray(value)) return value.map(stripHidden);
    if (value && typeof value === 'object') {
      const out = {};
      for (const [k, v] of Object.entries(value)) {
        if (!HIDDEN_KEYS.has(k.toLowerCase())) out[k] = stripHidden(v);
      }
      return out;
    }
    return value;
  }

  // ------------------------------------------------------------------------------------------
  // Experiment 1: state transition stepper (a concept card with the contracts' real shapes)
  // ------------------------------------------------------------------------------------------

  const GOAL = '查询 AgentEval Mini 四个批次的 Task Success 与发布规则，用 calculator 计算平均值，用 plot 画出四个批次与平均线，再引用证据给出是否发布的结论。';
  const KS_ARGS = { query: 'AgentEval Mini Task Success by batch and release rule', top_k: 4 };
  const EXP1 = [
    {
      label: 'State₀', who: 'Agent / Runtime', title: '目标已进入状态，但还没有证据',
      text: ['goal、允许的工具、预算与历史 Observation 构成可见状态。Runtime 根据缺口决定本步分支：还没有任何事实，所以是 action 分支，工具为 knowledge_search。',
        'Runtime 不把隐藏思维写进 state；模型看到的是下面这个有界视图 V(s₀)。'],
      json: { task: GOAL, observations: [], runtime_feedback: [],
        budget_left: { steps: 12, tool_calls: 10, seconds: 300, input_tokens: 32000, output_tokens: 4000 },
        branch: { kind: 'action', tool: 'knowledge_search' } },
    },
    {
      label: 'Decision₀', who: 'Model', title: '模型只补全参数值，得到候选 Decision',
      text: ['Runtime 先把 {"type": "action", "tool": "knowledge_search", "arguments": 写进 assistant 回合，并内联 knowledge_search 的参数 schema；模型只续写 arguments 的值。',
        'decision_summary 由 Runtime 根据当前缺口生成，不向模型索取推理。此时它仍只是候选，没有执行权限。'],
      json: { type: 'action', tool: 'knowledge_search', arguments: KS_ARGS,
        decision_summary: 'Facts or release rule missing: search the package knowledge.' },
    },
    {
      label: 'Action₀', who: 'Runtime', title: 'Runtime 校验、检查预算与重复，然后分派',
      text: ['Decision 精确字段检查通过（没有 reasoning 等多余字段）；参数按 KnowledgeSearchArgs 校验并规范化；规范化 action signature 尚未重复；tool_calls 0 < 10。',
        '通过后才写 tool.started 事件并在工作线程中执行工具，等待上限为 min(5 s, 剩余时间)。'],
      json: { seq: 8, type: 'tool.started', step: 1, attempt: 1, phase: 'tool', elapsed_ms: 2140.5,
        tool: 'knowledge_search', arguments: KS_ARGS },
    },
    {
      label: 'Observation₀', who: 'Tool → Runtime', title: '工具返回可归因的事实，Runtime 写成 Observation',
      text: ['knowledge_search 只读包内 knowledge/*.md，用检索排序选出片段，并从 markdown 表格与规则行解析出结构化 data。',
        '只有 Runtime 把结果写成 Observation：id、tool、ok 与 result（失败时为 error）。下面的 citations 省略为一条。'],
      json: { id: 'obs-knowledge_search-1', tool: 'knowledge_search', ok: true,
        result: {
          query: KS_ARGS.query,
          citations: [{ id: 'c1', source_id: 'agent_eval_mini.md', chunk_id: 'agent_eval_mini.md#3',
            text: '| Batch A | 50 | 72% | 0.94 | 3.1 | …', source_sha256: '<sha256 of the knowledge file>' }],
          source_sha256: '<aggregate sha256>',
          data: { batches: { 'Batch A': 72, 'Batch B': 78, 'Batch C': 81, 'Batch D': 85 },
            release_rule: { average_gte: 78, every_batch_gte: 70 } },
          summary: '4 batches and the release rule found in 4 cited chunks.',
        } },
    },
    {
      label: 'State₁', who: 'Agent / Runtime', title: 'Observation 改变了下一状态与下一分支',
      text: ['Runtime 追加 Observation，trace 写入 state_delta.observation_count = 1，并把事实整理进下一轮视图。',
        'knowledge_search 已有成功 Observation，下一缺口是精确算术：下一步分支变为 calculator。这里不承诺某个固定算式——表达式仍要由模型根据 Observation 写出。'],
      json: { task: GOAL,
        observations: ['[obs-knowledge_search-1] knowledge_search ok: {data: {batches: {...}, release_rule: {...}}, citations: [...]}'],
        state_delta: { observation_count: 1 },
        runtime_feedback: [],
        budget_left: { steps: 11, tool_calls: 9, seconds: 297, input_tokens: 31180, output_tokens: 3968 },
        branch: { kind: 'action', tool: 'calculator' } },
    },
  ];
  let exp1Index = 0;

  function renderExp1() {
    const steps = $('exp1-steps');
    clear(steps, EXP1.map((s, i) => el('button', {
      type: 'button', role: 'tab', class: 'step' + (i === exp1Index ? ' current' : '') + (i < exp1Index ? ' passed' : ''),
      'aria-selected': i === exp1Index ? 'true' : 'false', dataset: { step: String(i) },
      onclick: () => { exp1Index = i; renderExp1(); },
    }, el('span', { class: 'step-label', text: s.label }), el('span', { class: 'step-who', text: s.who }))));
    const step = EXP1[exp1Index];
    clear($('exp1-card'), el('div', { class: 'step-title' }, el('span', { class: 'who', text: step.who }), step.title),
      step.text.map((t) => el('p', { text: t })));
    $('exp1-json').textContent = pretty(step.json);
    $('exp1-pos').textContent = (exp1Index + 1) + ' / ' + EXP1.length;
    $('exp1-prev').disabled = exp1Index === 0;
    $('exp1-next').disabled = exp1Index === EXP1.length - 1;
  }

  // ------------------------------------------------------------------------------------------
  // Experiment 2: dynamic routing, validated by the real runner
  // ------------------------------------------------------------------------------------------

  const EXP2 = [
    { tab: '入门提示', request: '先给我一个 tool calling 的入门提示，随便看看就行。',
      decision: { type: 'action', tool: 'search', arguments: { query: 'tool calling JSON schema', top_k: 3 } },
      summary: '固定小语料足够完成轻量提示检索；低成本、低延迟，但不能作为正式课程引用。',
      lesson: 'search 是 No.8 的单次路由示例工具，不在 No.17 示例包的三个工具里；把它交给实验三的 Runner，看真实 Runtime 怎样处理一个不在 allowlist 中的工具。' },
    { tab: '课程原文 + citation', request: '请引用课程原文，说明 AgentEval Mini 的发布规则。',
      decision: { type: 'action', tool: 'knowledge_search',
        arguments: { query: 'AgentEval Mini release rule average_gte every_batch_gte', top_k: 4 } },
      summary: '需要可引用的原文：只有 knowledge_search 返回 source_id、chunk_id 与 source_sha256，并从 markdown 解析出规则。',
      lesson: '“查资料”的措辞相同，但需要 citation 时只能选 knowledge_search。' },
    { tab: '已有表达式', request: '已经有表达式 (72 + 78 + 81 + 85) / 4，请给出精确的平均值。',
      decision: { type: 'action', tool: 'calculator', arguments: { expression: '(72 + 78 + 81 + 85) / 4' } },
      summary: '表达式已经确定，缺的是精确算术：交给 AST 白名单计算器，而不是让模型心算。',
      lesson: 'calculator 只有 expression 一个字段；多写 variables 或 formula 都会被拒绝。' },
    { tab: '已有结构化数值（故意无效）', request: '四个批次的数值都有了，把它们画成柱状图。',
      decision: { type: 'action', tool: 'plot',
        arguments: { kind: 'bar', labels: ['Batch A', 'Batch B', 'Batch C', 'Batch D'], values: [72, 78, 81, 85] } },
      summary: '结构化数值已齐，选择 plot 是对的——但参数沿用了早期路由示例的 {kind, labels, values} 形状。',
      lesson: '合法 JSON、工具名也对，仍不等于参数契约有效：No.17 的 plot 没有 kind 字段（固定画柱状图），且 title 必填。正确参数是 labels、values、title 与可选的 average、y_label。',
      fixed: { labels: ['Batch A', 'Batch B', 'Batch C', 'Batch D'], values: [72, 78, 81, 85],
        title: 'AgentEval Mini Task Success', average: 79 } },
  ];
  let exp2Index = 3;
  let exp2Token = 0;

  function renderExp2() {
    const item = EXP2[exp2Index];
    clear($('exp2-tabs'), EXP2.map((r, i) => el('button', {
      type: 'button', role: 'tab', class: 'req' + (i === exp2Index ? ' current' : ''), dataset: { req: String(i) },
      'aria-selected': i === exp2Index ? 'true' : 'false',
      onclick: () => { exp2Index = i; exp2Token += 1; renderExp2(); },
    }, (i + 1) + ' · ' + r.tab)));
    $('exp2-request').textContent = '“' + item.request + '”';
    $('exp2-json').textContent = pretty({ ...item.decision, decision_summary: item.summary });
    $('exp2-summary').textContent = item.summary;
    $('exp2-lesson').textContent = item.lesson;
    clear($('exp2-result'), el('span', { class: 'state-idle', text: '未运行' }),
      '——点击按钮，由本机 Runner 的真实 Runtime 校验这组参数。');
  }

  async function validateWithRunner(tool, args, label) {
    const box = $('exp2-result');
    const token = ++exp2Token;
    const base = currentRunner();
    if (!base) {
      clear(box, el('span', { class: 'state-bad', text: '未运行' }), '——Runner 地址无效（只允许本机 loopback 地址）。');
      return;
    }
    clear(box, el('span', { class: 'state-active', text: '校验中…' }));
    const res = await runnerFetch(base, '/schema/validate', { method: 'POST', body: { tool, arguments: args } });
    if (token !== exp2Token) return;
    if (res.unreachable) {
      clear(box, el('span', { class: 'state-bad', text: '未运行 / runner not reachable' }),
        el('div', { class: 'small muted', text: '无法连接 ' + base + '。启动示例包中的 algolab_local_runner.py 后再试；页面不会显示预设的校验结果。' }));
      return;
    }
    const data = res.data || {};
    const err = data.error || res.error || null;
    const valid = res.ok && data.ok !== false && data.valid !== false && !data.error;
    const header = valid
      ? el('div', { class: 'verdict ok' }, el('strong', { text: '✓ 参数有效' }), ' ', label || '')
      : el('div', { class: 'verdict bad' }, el('strong', { text: '✗ ' + ((err && err.code) || 'rejected') }), ' ', label || '');
    const parts = [header];
    if (err && err.message) parts.push(el('div', { class: 'message mono', text: err.message }));
    for (const k of ['bad_fields', 'missing', 'unexpected', 'missing_fields', 'unexpected_fields']) {
      const list = (err && Array.isArray(err[k]) && err[k]) || (Array.isArray(data[k]) && data[k]) || [];
      if (list.length) parts.push(el('div', { class: 'small mono', text: k + ': ' + list.join(', ') }));
    }
    parts.push(el('details', { class: 'raw' }, el('summary', { text: 'Runner 的原始响应（HTTP ' + res.status + '）' }),
      el('pre', { class: 'json small', text: pretty(data) })));
    const item = EXP2[exp2Index];
    if (!valid && item.fixed && tool === 'plot' && !label) {
      parts.push(el('button', { type: 'button', id: 'exp2-validate-fixed', class: 'small-btn',
        onclick: () => validateWithRunner('plot', item.fixed, '（改正后的参数：labels、values、title、average）') },
      '改成正确参数再校验'));
      parts.push(el('pre', { class: 'json small', text: pretty(item.fixed) }));
    }
    clear(box, parts);
  }

  // ------------------------------------------------------------------------------------------
  // Experiment 3: the real run
  // ------------------------------------------------------------------------------------------

  const BUDGET_FIELDS = [
    { key: 'max_steps', label: '最大步数 max_steps', int: true },
    { key: 'max_tool_calls', label: '工具调用 max_tool_calls', int: true },
    { key: 'max_seconds', label: '墙钟秒数 max_seconds', int: false },
    { key: 'max_input_tokens', label: '累计输入 token', int: true },
    { key: 'max_output_tokens', label: '累计输出 token', int: true },
  ];
  const BUDGET_ADVANCED = [
    { key: 'max_retries', label: 'max_retries（0..3）', int: true },
    { key: 'repeated_action_limit', label: 'repeated_action_limit', int: true },
    { key: 'no_progress_limit', label: 'no_progress_limit', int: true },
    { key: 'decision_max_new_tokens', label: '单轮 max_new_tokens', int: true },
    { key: 'temperature', label: 'temperature', int: false },
    { key: 'top_p', label: 'top_p（采样时）', int: false },
    { key: 'top_k', label: 'top_k（采样时）', int: true },
  ];
  const PRESET = { max_steps: 12, max_tool_calls: 10, max_seconds: 300, max_input_tokens: 32000, max_output_tokens: 4000,
    max_retries: 2, repeated_action_limit: 3, no_progress_limit: 3, decision_max_new_tokens: 256, temperature: 0,
    top_p: 0.8, top_k: 20 };
  const TERMINAL = new Set(['completed', 'stopped', 'failed', 'cancelled']);
  const STATUS_TEXT = { queued: '排队中 queued', running: '运行中 running', completed: '已完成 completed',
    stopped: '已停止 stopped', failed: '失败 failed', cancelled: '已取消 cancelled' };
  const STOP_TEXT = {
    completed: '证据齐全的 Final 被接受', max_steps: '外层 step 用尽', tool_budget: '工具调用次数用尽',
    token_budget: '累计 token 到达上限', timeout: '墙钟时间到达上限', loop_detected: '循环 / 无进展保护触发',
    final_unverified: 'Final 的论断反复核验不通过：未采纳，给出未核验的候选答案',
    invalid_decision: 'Decision 修复次数用尽仍无效', cancelled: '用户取消', model_unavailable: '模型不可用（目录、依赖、设备或权重）',
    runtime_error: '意外的运行时错误',
  };

  const S = {
    runner: null,        // base URL that passed GET /status
    status: null,        // GET /status body
    schema: null,        // GET /schema body
    testPolicy: false,
    inspect: null,       // {key, ok, data}
    budgetLimits: {},    // key -> {min, max, exclusiveMin}
    run: null,           // see newRun()
    session: null,       // the conversation of follow-up questions, see sendFollowup()
    sending: false,      // a follow-up is being submitted
    followupError: '',
  };

  function newRun(id, status) {
    return { id, status: status || 'queued', stopReason: null, events: new Map(), lastSeq: 0, final: null,
      metrics: null, error: null, polling: true, failures: 0, pngFor: null, finishedSeen: false,
      runnerBase: S.runner, testPolicy: S.testPolicy,
      transport: null, stream: null, streamOpens: 0, streamRetries: 0 };
  }

  function setTestPolicyLabels(on) {
    $('test-policy-banner').hidden = !on;
    for (const id of ['run-tp-label', 'metrics-tp-label', 'chart-tp-label']) $(id).hidden = !on;
  }

  function onRunnerUrlInput() {
    const parsed = normalizeRunnerUrl($('runner-url').value);
    const errorBox = $('runner-url-error');
    errorBox.hidden = parsed.ok;
    errorBox.textContent = parsed.ok ? '' : parsed.error;
    $('runner-check').disabled = !parsed.ok;
    if (S.runner && (!parsed.ok || parsed.base !== S.runner)) {
      S.runner = null; S.status = null; S.schema = null; S.inspect = null; S.testPolicy = false;
      setTestPolicyLabels(S.run ? S.run.testPolicy : false);
      clear($('runner-state'), el('span', { class: 'state-idle', text: '尚未检查' }), '——地址已改变，请重新检查。');
      $('runner-info').hidden = true;
      resetInspect('Runner 已改变，需要重新检查模型。');
    }
    updateStartButton();
  }

  function depLine(name, info) {
    if (info === null) return name + ': 未安装';
    if (info === true || info === false) return name + ': ' + (info ? '可用' : '缺失');
    if (typeof info === 'string' || typeof info === 'number') return name + ': ' + info;
    if (!info || typeof info !== 'object') return name + ': —';
    const ok = info.available ?? info.ok ?? info.installed;
    const bits = [];
    if (ok !== undefined) bits.push(ok ? '可用' : '缺失');
    if (info.version) bits.push(String(info.version));
    if (info.error || info.message || info.hint) bits.push(String(info.error || info.message || info.hint));
    return name + ': ' + (bits.join(' · ') || JSON.stringify(info));
  }

  function kv(dl, rows) {
    clear(dl, rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v instanceof Node ? v : String(v))]));
    dl.hidden = rows.length === 0;
  }

  /** Runner facts from GET /status; returns whether it has the agent capability. */
  function renderRunnerInfo(st) {
    const caps = Array.isArray(st.capabilities) ? st.capabilities : Object.keys(st.capabilities || {});
    const hasAgent = caps.includes('agent');
    S.status = st;
    S.testPolicy = st.test_policy === true || (st.test_policy && typeof st.test_policy === 'object');
    setTestPolicyLabels(S.testPolicy);
    const deps = st.dependencies && typeof st.dependencies === 'object'
      ? Object.entries(st.dependencies).map(([k, v]) => depLine(k, v)).join('\n') : '—';
    const models = Array.isArray(st.loaded_models) ? st.loaded_models : (Array.isArray(st.models) ? st.models : []);
    const loaded = models.length
      ? models.map((m) => (typeof m === 'string' ? m : [m.name, m.backend, m.device, m.dtype].filter(Boolean).join(' · '))).join('\n')
      : '无';
    const py = st.python && typeof st.python === 'object'
      ? [st.python.version, st.python.implementation, st.python.executable].filter(Boolean).join(' · ') : (st.python || '—');
    kv($('runner-info'), [
      ['版本', st.version || '—'],
      ['capabilities', caps.join(', ') || '—'],
      ['Python', py],
      ['依赖', el('span', { class: 'pre-line', text: deps })],
      ['已加载模型', el('span', { class: 'pre-line', text: loaded })],
      ['队列长度', st.queue_length ?? '—'],
      ...(S.testPolicy ? [['策略', el('span', { class: 'tp-badge small', text: TEST_POLICY_LABEL })]] : []),
    ]);
    return hasAgent;
  }

  async function checkRunner() {
    const parsed = normalizeRunnerUrl($('runner-url').value);
    if (!parsed.ok) { onRunnerUrlInput(); return; }
    const base = parsed.base;
    clear($('runner-state'), el('span', { class: 'state-active', text: '检查中…' }));
    const res = await runnerFetch(base, '/status');
    if (!res.ok) {
      S.runner = null; S.status = null; S.schema = null; S.testPolicy = false;
      setTestPolicyLabels(S.run ? S.run.testPolicy : false);
      clear($('runner-state'), el('span', { class: 'state-bad', text: '未运行' }),
        res.unreachable ? '——runner not reachable：' + base + ' 没有响应。请在示例包目录运行 python algolab_local_runner.py。'
          : '——Runner 返回错误：' + res.error.code + ' · ' + res.error.message);
      $('runner-info').hidden = true;
      updateStartButton();
      return;
    }
    const st = res.data || {};
    const hasAgent = renderRunnerInfo(st);
    if (!hasAgent) {
      S.runner = null;
      clear($('runner-state'), el('span', { class: 'state-bad', text: '不兼容' }),
        '——这个 Runner 没有 agent capability；请使用 No.17 示例包中的 algolab_local_runner.py。');
      updateStartButton();
      return;
    }
    S.runner = base;
    clear($('runner-state'), el('span', { class: 'state-ok', text: '已连接' }), '——' + base + ' · runner ' + (st.version || '?'));
    $('model-inspect').disabled = false;
    await loadSchema(base);
    updateStartButton();
  }

  /** After a run: loaded models and queue length have changed. */
  async function refreshRunnerInfo(base) {
    if (S.runner !== base) return;
    const res = await runnerFetch(base, '/status');
    if (res.ok && S.runner === base) renderRunnerInfo(res.data || {});
  }

  async function loadSchema(base) {
    const res = await runnerFetch(base, '/schema');
    if (!res.ok) {
      S.schema = null;
      clear($('pack-select'), el('option', { value: '', text: '（无法读取 /schema）' }));
      return;
    }
    S.schema = res.data || {};
    const packs = normalizePacks(S.schema.packs);
    const select = $('pack-select');
    clear(select, packs.map((p) => el('option', { value: p.name, text: p.label, disabled: !p.ok })));
    select.disabled = packs.length === 0;
    S.packs = packs;
    showPackGoal();
    const props = ((S.schema.budgets_schema || S.schema.budgets || {}).properties) || {};
    S.budgetLimits = {};
    for (const f of [...BUDGET_FIELDS, ...BUDGET_ADVANCED]) {
      const p = props[f.key] || {};
      const anyOf = Array.isArray(p.anyOf) ? p.anyOf.find((x) => x.type && x.type !== 'null') || {} : {};
      const spec = { ...anyOf, ...p };
      S.budgetLimits[f.key] = { min: spec.minimum, max: spec.maximum, exclusiveMin: spec.exclusiveMinimum,
        int: spec.type === 'integer' || (spec.type === undefined && f.int) };
      const input = $('b-' + f.key);
      if (input) {
        if (spec.minimum !== undefined) input.min = spec.minimum;
        else if (spec.exclusiveMinimum !== undefined) input.min = spec.exclusiveMinimum;
        if (spec.maximum !== undefined) input.max = spec.maximum;
        const hint = $('bh-' + f.key);
        if (hint) hint.textContent = rangeText(S.budgetLimits[f.key]);
      }
    }
    checkBudgets();
  }

  function normalizePacks(packs) {
    if (!packs) return [{ name: 'default', label: 'default' }];
    const list = Array.isArray(packs) ? packs : Object.entries(packs).map(([name, v]) => ({ name, ...(typeof v === 'object' ? v : {}) }));
    return list.map((p) => {
      if (typeof p === 'string') return { name: p, label: p };
      const name = p.name || p.id;
      const extra = p.task_id || p.id || '';
      return { name, goal: p.goal || '', ok: p.ok !== false,
        label: (extra && extra !== name ? name + ' · ' + extra : name) + (p.ok === false ? '（不可用）' : '') };
    }).filter((p) => p.name);
  }

  function showPackGoal() {
    const pack = (S.packs || []).find((p) => p.name === $('pack-select').value);
    $('pack-goal').textContent = pack && pack.goal ? '任务：' + pack.goal : '';
  }

  function rangeText(limit) {
    if (!limit) return '';
    const lo = limit.min !== undefined ? limit.min : (limit.exclusiveMin !== undefined ? '>' + limit.exclusiveMin : '');
    const hi = limit.max !== undefined ? limit.max : '';
    return lo !== '' || hi !== '' ? '范围 ' + lo + ' – ' + hi : '';
  }

  function buildBudgetInputs() {
    const make = (fields, box) => clear(box, fields.map((f) => el('label', { class: 'budget' },
      el('span', { text: f.label }),
      el('input', { id: 'b-' + f.key, type: 'number', step: f.int ? '1' : 'any', value: String(PRESET[f.key]),
        oninput: () => { checkBudgets(); updateStartButton(); } }),
      el('span', { id: 'bh-' + f.key, class: 'hint muted small', text: '' }))));
    make(BUDGET_FIELDS, $('budget-grid'));
    make(BUDGET_ADVANCED, $('budget-grid-adv'));
  }

  function applyPreset() {
    const rec = (S.schema && S.schema.recommended_budgets) || {};
    for (const f of [...BUDGET_FIELDS, ...BUDGET_ADVANCED]) {
      const value = f.key in PRESET ? PRESET[f.key] : rec[f.key];
      $('b-' + f.key).value = String(value);
    }
    checkBudgets();
    updateStartButton();
  }

  /** Reads the budget inputs; returns {ok, budgets, error}. */
  function checkBudgets() {
    const budgets = {};
    const problems = [];
    for (const f of [...BUDGET_FIELDS, ...BUDGET_ADVANCED]) {
      const input = $('b-' + f.key);
      const raw = input.value.trim();
      const value = Number(raw);
      const lim = S.budgetLimits[f.key] || {};
      let bad = raw === '' || !Number.isFinite(value);
      if (!bad && (lim.int || f.int) && !Number.isInteger(value)) bad = true;
      if (!bad && lim.min !== undefined && value < lim.min) bad = true;
      if (!bad && lim.exclusiveMin !== undefined && value <= lim.exclusiveMin) bad = true;
      if (!bad && lim.max !== undefined && value > lim.max) bad = true;
      input.classList.toggle('invalid', bad);
      if (bad) problems.push(f.key + (rangeText(lim) ? '（' + rangeText(lim) + '）' : ''));
      else budgets[f.key] = value;
    }
    const box = $('budget-error');
    box.hidden = problems.length === 0;
    box.textContent = problems.length ? '预算超出允许范围：' + problems.join('、') : '';
    return { ok: problems.length === 0, budgets };
  }

  // The model field takes a local path, or a served model as the CLI writes it:
  // openai:BASE_URL#NAME (an OpenAI-compatible server) or anthropic:NAME. The runner decides which
  // hosts it may reach (loopback unless started with --allow-model-host); keys stay in its environment.
  function modelFields() {
    const text = $('model-path').value.trim();
    if (text.startsWith('openai:')) {
      const rest = text.slice('openai:'.length), cut = rest.lastIndexOf('#');
      return { model: { kind: 'openai_compatible', base_url: cut < 0 ? rest : rest.slice(0, cut), model: cut < 0 ? '' : rest.slice(cut + 1) } };
    }
    if (text.startsWith('anthropic:')) return { model: { kind: 'anthropic', model: text.slice('anthropic:'.length) } };
    return { model_path: text, device: $('model-device').value, dtype: $('model-dtype').value };
  }

  function inspectKey() {
    return [S.runner, $('model-path').value.trim(), $('model-device').value, $('model-dtype').value].join('\n');
  }

  function resetInspect(reason) {
    S.inspect = null;
    clear($('model-state'), el('span', { class: 'state-idle', text: '未检查' }), reason ? '——' + reason : '');
    $('model-info').hidden = true;
    updateStartButton();
  }

  async function inspectModel() {
    if (!S.runner) { resetInspect('请先检查 Runner。'); return; }
    const modelPath = $('model-path').value.trim();
    if (!modelPath) { resetInspect('请填写模型目录或 GGUF 文件路径。'); return; }
    const key = inspectKey();
    clear($('model-state'), el('span', { class: 'state-active', text: '检查中…' }), '（读取文件头与依赖，不加载权重）');
    const body = modelFields();
    const res = await runnerFetch(S.runner, '/models/inspect', { method: 'POST', body, timeoutMs: 60000 });
    if (key !== inspectKey()) return; // inputs changed while waiting
    const data = res.data || {};
    const ok = res.ok && data.ok !== false && !data.error;
    S.inspect = { key, ok, data };
    if (!ok) {
      const err = data.error || res.error || {};
      const report = err.report || data;
      const reason = typeof err === 'string' ? err : [err.code, err.message].filter(Boolean).join(' · ');
      clear($('model-state'), el('span', { class: 'state-bad', text: res.unreachable ? '未运行' : '检查未通过' }),
        '——' + (reason || data.reason || '模型不可用'));
      kv($('model-info'), inspectRows(report));
    } else {
      clear($('model-state'), el('span', { class: 'state-ok', text: '检查通过' }), '——可以启动真实运行。');
      kv($('model-info'), inspectRows(data));
    }
    updateStartButton();
  }

  function inspectRows(data) {
    const d = data || {};
    const join = (obj) => Object.entries(obj || {}).map(([k, v]) => k + '=' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(' · ');
    const rows = [];
    if (d.name || d.kind || d.backend) rows.push(['模型', [d.name, d.kind, d.backend].filter(Boolean).join(' · ')]);
    if (d.test_policy) rows.push(['策略', el('span', { class: 'tp-badge small', text: TEST_POLICY_LABEL })]);
    if (d.device || d.dtype) rows.push(['device / dtype', (d.device || '—') + ' / ' + (d.dtype || '—')]);
    if (d.config && Object.keys(d.config).length) rows.push(['config', join(d.config)]);
    if (d.tokenizer) rows.push(['tokenizer', join(d.tokenizer)]);
    if (d.weights) rows.push(['weights', join(d.weights)]);
    if (d.dependencies && Object.keys(d.dependencies).length) {
      rows.push(['依赖', el('span', { class: 'pre-line', text: Object.entries(d.dependencies).map(([k, v]) =>
        k + ': ' + (v && typeof v === 'object' ? (v.error ? (v.error === 'missing' ? '未安装' : v.error) + (v.hint ? '（' + v.hint + '）' : '') : (v.version || '可用')) : (v ?? '未安装'))).join('\n') })]);
    }
    if (d.host) rows.push(['served', d.host + (d.served && d.served.models ? ' · ' + d.served.models.join(', ') : '') + (d.key_sent ? ' · key from the runner env' : '')]);
    if (d.python) rows.push(['Python', typeof d.python === 'object' ? join(d.python) : d.python]);
    if (d.provenance) rows.push(['provenance', join(d.provenance)]);
    if (d.path_hash) rows.push(['path_hash', d.path_hash]);
    if (Array.isArray(d.problems) && d.problems.length) rows.push(['问题', el('span', { class: 'pre-line state-bad', text: d.problems.join('\n') })]);
    return rows;
  }

  function runActive() {
    return S.run && !TERMINAL.has(S.run.status);
  }

  function updateStartButton() {
    const reasons = [];
    if (!S.runner) reasons.push('先检查 Runner（未运行）');
    else if (!S.inspect || S.inspect.key !== inspectKey()) reasons.push('先检查模型（“检查模型”通过后才能启动）');
    else if (!S.inspect.ok) reasons.push('模型检查未通过：' + ($('model-state').textContent || ''));
    const budgets = checkBudgets();
    if (!budgets.ok) reasons.push('预算超出允许范围');
    if (runActive()) reasons.push('已有运行进行中');
    $('run-start').disabled = reasons.length > 0;
    $('run-start').textContent = S.testPolicy ? '启动运行（测试策略）' : '启动真实运行';
    $('start-reason').textContent = reasons.length ? '不能启动：' + reasons.join('；')
      : '准备就绪：启动后浏览器通过 SSE 事件流跟随运行（打不开时改为每 500 ms 按 after_seq 增量轮询）。';
    $('model-inspect').disabled = !S.runner;
    renderFollowup(S.run);
  }

  async function startRun() {
    const budgets = checkBudgets();
    if (!budgets.ok || !S.runner || !S.inspect || !S.inspect.ok) { updateStartButton(); return; }
    const body = { ...modelFields(), budgets: budgets.budgets };
    const pack = $('pack-select').value;
    if (pack) body.pack = pack;
    $('run-start').disabled = true;
    clear($('run-error'));
    $('run-error').hidden = true;
    const res = await runnerFetch(S.runner, '/agent/runs', { method: 'POST', body });
    if (!res.ok || !res.data || !res.data.id) {
      $('run-error').hidden = false;
      $('run-error').textContent = '未运行——创建 Job 失败：' + (res.error ? res.error.code + ' · ' + res.error.message : '响应缺少 id');
      updateStartButton();
      return;
    }
    S.run = newRun(String(res.data.id), res.data.status);
    S.session = null;  // a new run starts a new conversation
    S.followupError = '';
    $('run-explain').hidden = true;
    renderRun();
    updateStartButton();
    follow(S.run);
  }

  // ------------------------------------------------------------------------------------------
  // Following a run: Server-Sent Events first, after_seq polling when the stream cannot be opened
  // ------------------------------------------------------------------------------------------

  const STREAM_RETRIES = 5;  // consecutive failed (re)connections before falling back to polling

  function follow(run) {
    if (typeof EventSource === 'function') openStream(run);
    else poll(run);
  }

  /** One EventSource at a time, opened after the highest merged seq, so a reconnect neither skips
   *  nor repeats an event (and merging by seq would drop a repeat anyway). The browser's own
   *  reconnect is not used: each reconnect is a new EventSource with ?after_seq=lastSeq. */
  function openStream(run) {
    if (S.run !== run || !run.polling) return;
    const url = run.runnerBase + '/agent/runs/' + encodeURIComponent(run.id) + '/events?after_seq=' + run.lastSeq;
    let es;
    try {
      es = new EventSource(url);
    } catch (e) {
      fallBackToPolling(run);
      return;
    }
    run.stream = es;
    let opened = false;
    es.onopen = () => {
      opened = true;
      run.streamOpens += 1;
      run.transport = 'stream';
      renderRun();
    };
    es.onmessage = (msg) => {
      if (S.run !== run || run.stream !== es) { es.close(); return; }
      let event;
      try { event = JSON.parse(msg.data); } catch (e) { return; }
      run.streamRetries = 0;
      run.failures = 0;
      $('run-error').hidden = true;
      mergeRunView(run, { events: [event] });
      if (run.finishedSeen) {
        closeStream(run);
        poll(run);  // one read of the finished view: status, final, metrics, error
        return;
      }
      scheduleRender(run);
    };
    es.onerror = () => {
      if (run.stream !== es) return;
      closeStream(run);
      if (S.run !== run || !run.polling) return;
      run.streamRetries += 1;
      // Never opened (a 4xx such as 429 too_many_streams, an old runner without the route) or failing
      // again and again: poll instead. Otherwise the stream was cut or reached its lifetime: resume it.
      if (!opened || run.streamRetries > STREAM_RETRIES) {
        fallBackToPolling(run);
        return;
      }
      setTimeout(() => openStream(run), 300 * run.streamRetries);
    };
  }

  function closeStream(run) {
    if (run.stream) {
      run.stream.close();
      run.stream = null;
    }
  }

  function fallBackToPolling(run) {
    closeStream(run);
    run.transport = 'poll';
    renderRun();
    poll(run);
  }

  let renderQueued = false;
  function scheduleRender(run) {  // events can arrive faster than the page needs to redraw
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      if (S.run === run) renderRun();
    });
  }

  async function poll(run) {
    if (run.polling && run.transport !== 'stream') run.transport = 'poll';
    while (run.polling && S.run === run) {
      const res = await runnerFetch(run.runnerBase, '/agent/runs/' + encodeURIComponent(run.id) + '?after_seq=' + run.lastSeq,
        { timeoutMs: 10000 });
      if (S.run !== run) return;
      if (!res.ok) {
        run.failures += 1;
        $('run-error').hidden = false;
        $('run-error').textContent = (res.unreachable ? 'runner not reachable' : res.error.code + ' · ' + res.error.message) +
          '（轮询失败 ' + run.failures + ' 次）';
        if (run.failures >= 20 || (res.status >= 400 && res.status < 500)) {
          run.polling = false;
          renderRun();
          updateStartButton();
          return;
        }
      } else {
        run.failures = 0;
        $('run-error').hidden = true;
        mergeRunView(run, res.data || {});
        renderRun();
        if (TERMINAL.has(run.status) && (run.finishedSeen || !(res.data.events || []).length)) {
          run.polling = false;
          renderRun();
          updateStartButton();
          refreshRunnerInfo(run.runnerBase);
          return;
        }
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** Merge one incremental view into the run: events keyed by seq, so repeats are harmless. */
  function mergeRunView(run, view) {
    for (const event of view.events || []) {
      if (!event || typeof event.seq !== 'number') continue;
      run.events.set(event.seq, event);
      if (event.type === 'run.finished') {
        run.finishedSeen = true;
        // A streamed run learns its end from the event itself; the last poll confirms it.
        if (event.status) run.status = event.status;
        if (event.stop_reason !== undefined) run.stopReason = event.stop_reason;
        for (const key of ['final', 'unverified', 'metrics', 'error']) if (event[key] !== undefined) run[key] = event[key];
      } else if (run.status === 'queued') {
        run.status = 'running';
      }
    }
    // after_seq is the highest seq actually merged, so nothing is skipped if a page was cut short.
    run.lastSeq = Math.max(run.lastSeq, ...run.events.keys());
    if (view.status) run.status = view.status;
    if (view.stop_reason !== undefined) run.stopReason = view.stop_reason;
    if (view.final !== undefined) run.final = view.final;
    if (view.metrics !== undefined) run.metrics = view.metrics;
    if (view.error !== undefined) run.error = view.error;
    for (const e of run.events.values()) {
      if (e.type === 'model.load.completed' && e.model && e.model.is_test_policy) run.testPolicy = true;
    }
  }

  function sortedEvents(run) {
    return [...run.events.values()].sort((a, b) => a.seq - b.seq);
  }

  /** Stage marks from event types: done ✓, active ●, failed !, idle ○. */
  function deriveStages(events, status) {
    const st = { load: 'idle', decision: 'idle', validate: 'idle', tool: 'idle', observation: 'idle', final: 'idle' };
    let current = status === 'queued' ? 'queued' : 'idle';
    let writing = null;  // the model call in progress: characters written so far (never the text)
    const set = (k, v) => { st[k] = v; if (v === 'active') current = k; };
    for (const e of events) {
      if (e.type === 'model.progress') { writing = { kind: e.kind, chars: e.chars }; continue; }
      if (e.type.startsWith('model.')) writing = null;
      switch (e.type) {
        case 'model.load.started': set('load', 'active'); break;
        case 'model.load.completed': set('load', 'done'); break;
        case 'model.load.failed': set('load', 'failed'); break;
        case 'model.started': case 'model.repair.started':
          if (st.load !== 'done') st.load = 'done';
          set('decision', 'active'); break;
        case 'model.failed': set('decision', 'failed'); break;
        case 'decision.invalid': set('decision', 'failed'); break;
        case 'decision.valid': case 'decision.repaired': {
          set('decision', 'done');
          const isFinal = e.decision && e.decision.type === 'final';
          set(isFinal ? 'final' : 'validate', 'active');
          break;
        }
        case 'tool.rejected': set('validate', 'failed'); set('observation', 'failed'); break;
        case 'guard.loop_detected': case 'guard.no_progress': set('validate', 'failed'); break;
        case 'tool.started': set('validate', 'done'); set('tool', 'active'); break;
        case 'tool.retry': set('tool', 'active'); break;
        case 'tool.failed': set('tool', 'failed'); break;
        case 'tool.observation': {
          const ok = e.observation && e.observation.ok;
          set('tool', ok ? 'done' : 'failed');
          set('observation', ok ? 'done' : 'failed');
          break;
        }
        case 'version.trial':
        return row(e.passed ? 'obs' : 'bad', '版本试跑', el('span', { text: '第 ' + e.trial + ' 个抽样版本（' +
          String(e.function || '') + (e.lines ? '，' + e.lines + ' 行' : '') + '）' + (e.refused ? ' → 未试跑：' + (e.summary || '')
            : '：在工作区副本上写入并运行测试 → ' + (e.passed ? '测试通过，写入这一版' : '未通过（' + (e.summary || '') + '）')) }));
      case 'final.validated': set('final', e.accepted ? 'done' : 'failed'); break;
        case 'run.finished': {
          for (const k of Object.keys(st)) if (st[k] === 'active') st[k] = e.status === 'completed' ? 'done' : 'failed';
          if (e.stop_reason === 'model_unavailable' && st.load !== 'done') st.load = 'failed';
          current = 'finished';
          break;
        }
        default: break;
      }
    }
    if (TERMINAL.has(status) && current !== 'finished') {
      for (const k of Object.keys(st)) if (st[k] === 'active') st[k] = status === 'completed' ? 'done' : 'failed';
      current = 'finished';
      writing = null;
    }
    return { stages: st, current, writing };
  }

  const MARKS = { done: '✓', active: '●', failed: '!', idle: '○' };

  function renderRun() {
    const run = S.run;
    setTestPolicyLabels(S.testPolicy || (run && run.testPolicy));
    if (!run) return;
    const events = sortedEvents(run);
    const pill = $('run-status');
    pill.textContent = STATUS_TEXT[run.status] || run.status;
    pill.className = 'status-pill status-' + run.status;
    $('run-stop-reason').textContent = run.stopReason ? 'stop_reason = ' + run.stopReason + '（' + (STOP_TEXT[run.stopReason] || '') + '）' : '';
    $('run-id').textContent = 'run ' + run.id + ' · ' + events.length + ' events · last_seq ' + run.lastSeq +
      (run.transport === 'stream' ? ' · SSE 事件流' : run.transport === 'poll' ? ' · after_seq 轮询' : '');
    $('run-id').dataset.transport = run.transport || '';
    const { stages, current, writing } = deriveStages(events, run.status);
    for (const li of $('stages').children) {
      const state = stages[li.dataset.stage];
      li.className = 'stage-' + state;
      li.querySelector('.mark').textContent = MARKS[state];
    }
    $('stage-now').textContent = 'stage = ' + (current === 'finished' ? 'finished · ' + run.status + '/' + (run.stopReason || '?') : current) +
      (writing ? ' · 模型正在输出（' + (writing.kind === 'arguments' ? '工具参数' : '文本') + ' ' + writing.chars + ' 字符）' : '');
    $('run-cancel').disabled = !runActive();
    $('run-export').disabled = events.length === 0;
    renderBudget(events);
    renderApproval(run, events);
    renderFinal(run);
    renderTimeline(events);
    renderMetrics(run);
    renderChart(run, events);
    renderFollowup(run);
  }

  function renderBudget(events) {
    const last = [...events].reverse().find((e) => e.type === 'budget' && e.remaining);
    $('run-budget').textContent = last
      ? '剩余预算（step ' + last.step + ' 开始时）：' + Object.entries(last.remaining).map(([k, v]) => k + ' ' + v).join(' · ')
      : '';
  }

  // ==========================================================================================
  // Approvals: the operator's card and the operator token (issue 52). Begin of the block.
  //
  // Only the operator answers: the runner prints, at start, a link to this page whose fragment
  // carries the runner's address and its token (#runner=...&runner-token=...). takeOperatorToken
  // keeps the token in sessionStorage under the runner's origin and removes it from the address
  // bar; it is sent (Authorization: Bearer) only to that runner and only to read and answer the
  // questions (GET /agent/runs/{id}/approvals, POST .../approvals/{approval_id}). The trace's
  // approval.requested event names no id and shows paths outside the workspace as <path>; with the
  // token the card shows the runner's own copy of the question: the whole command, real paths.
  // Every character that could hide, move or reorder text is drawn as a visible escape (\x1b,
  // \u202e) in a marked span; the command scrolls and its size is shown, so nothing is cut silently.
  // ==========================================================================================

  const LEVEL_TEXT = { read_only: '只读', workspace_write: '写工作区', network: '网络', unknown: '无法证明安全',
    privilege: '提权', destructive: '破坏性' };
  const DECISION_TEXT = { run: '运行', refuse: '拒绝', ask: '询问' };
  const BY_TEXT = { policy: '批准策略', pack_test_command: '任务包的测试命令', 'operator:approved': '你批准了',
    'operator:denied': '你拒绝了', 'operator:deadline': '到期未回答', 'operator:no_approver': '无人可批准',
    'operator:cancelled': '运行已取消' };
  const CHANNEL_TEXT = { page: '经本页（operator 令牌）', terminal: '经终端' };
  const levelText = (level) => (LEVEL_TEXT[level] ? LEVEL_TEXT[level] + ' ' : '') + '(' + (level || '?') + ')';

  const TOKEN_KEY = 'react-agent.runner-token:';
  const TOKEN_SHAPE = /^[A-Za-z0-9_-]{32,128}$/;

  /** Read #runner=...&runner-token=... once at load, keep the token for that runner, clear the fragment. */
  function takeOperatorToken() {
    const fragment = location.hash.replace(/^#/, '');
    if (!/(^|&)runner-token=/.test(fragment)) return;
    const params = new URLSearchParams(fragment);
    const token = params.get('runner-token') || '';
    const runner = normalizeRunnerUrl(params.get('runner') || $('runner-url').value);
    // The token leaves the address bar (and the history entry) whatever it holds.
    history.replaceState(null, '', location.pathname + location.search);
    if (!runner.ok || !TOKEN_SHAPE.test(token)) return;
    try { sessionStorage.setItem(TOKEN_KEY + runner.base, token); } catch (e) { return; }
    $('runner-url').value = runner.base;
  }

  /** The operator token of the runner at ``base`` (an origin), or null. */
  function operatorToken(base) {
    try { return base ? sessionStorage.getItem(TOKEN_KEY + base) : null; } catch (e) { return null; }
  }

  // What Python's approvals.visible escapes: controls (but \n), format (bidi, zero-width), separators,
  // surrogates, private use, unassigned.
  const HIDDEN_CHAR = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{Co}\p{Cn}]/u;

  function escapeOf(ch) {
    const code = ch.codePointAt(0);
    const hex = (n) => code.toString(16).padStart(n, '0');
    return code < 0x100 ? '\\x' + hex(2) : code < 0x10000 ? '\\u' + hex(4) : '\\U' + hex(8);
  }

  /** Text nodes, with each hidden character as a <span class="ctl"> holding its escape. */
  function visibleNodes(text) {
    const nodes = [];
    let plain = '';
    for (const ch of String(text ?? '')) {
      if (HIDDEN_CHAR.test(ch)) {
        if (plain) nodes.push(document.createTextNode(plain));
        plain = '';
        nodes.push(el('span', { class: 'ctl', title: 'U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0'), text: escapeOf(ch) }));
      } else plain += ch;
    }
    if (plain) nodes.push(document.createTextNode(plain));
    return nodes;
  }

  /** The question the run waits on: the last approval.requested with no approval.decided after it
   *  (a run asks one question at a time, and the bash tool decides each before the next). */
  function pendingApproval(events) {
    let pending = null;
    for (const e of events) {
      if (e.type === 'approval.requested') pending = e;
      else if (e.type === 'approval.decided' && pending && e.seq > pending.seq) pending = null;
    }
    return pending;
  }

  let approvalTimer = null;
  const approval = { seq: null, id: null, runId: null, runnerBase: null, expiresAt: 0, sent: false, note: '' };

  function secondsLeft() {
    return Math.max(0, Math.ceil((approval.expiresAt - Date.now()) / 1000));
  }

  function setApprovalButtons(enabled) {
    $('approval-approve').disabled = !enabled;
    $('approval-deny').disabled = !enabled;
  }

  function tickApproval() {
    if (approval.seq === null) return;
    const left = secondsLeft();
    $('approval-countdown').textContent = left > 0 ? '剩余 ' + left + ' 秒' : '已到期：命令被拒绝';
    if (left <= 0) setApprovalButtons(false);
  }

  /** Show one question on the card: a trace event (no id: it cannot be answered from it) or the
   *  operator's copy from the runner (with its id). Every field as text, escapes made visible. */
  function showApproval(question, run) {
    const card = $('approval-card');
    const command = String(question.command ?? '');
    approval.seq = question.seq ?? question.approval_id ?? '';
    approval.id = question.approval_id ? String(question.approval_id) : null;
    approval.runId = run ? run.id : null;
    approval.runnerBase = run ? run.runnerBase : null;
    const expires = Date.parse(question.expires_at);
    approval.expiresAt = Number.isFinite(expires) ? expires : Date.now() + 1000 * Number(question.seconds || 0);
    approval.sent = false;
    clear($('approval-command'), visibleNodes(command));
    $('approval-command').scrollTop = 0;
    const lines = command.split('\n').length;
    const hidden = $('approval-command').querySelectorAll('.ctl').length;
    $('approval-size').textContent = '整条命令：' + lines + ' 行 · ' + [...command].length + ' 字符' +
      (lines > 8 ? '（框内可滚动，请看到最后一行再回答）' : '') +
      (hidden ? ' · ' + hidden + ' 个控制/方向/零宽字符以转义显示（红底）' : '');
    $('approval-level').textContent = levelText(question.level);
    clear($('approval-reason'), visibleNodes(question.reason));
    const token = operatorToken(approval.runnerBase);
    if (approval.id) {
      approval.note = 'Job 正在等待你的回答；到期未回答即视为拒绝。命令只在沙箱中运行（只有工作区可写、没有网络）。' +
        (command.includes('{workspace}') ? '{workspace} 是工作区目录；其他路径按命令原样显示。' : '');
    } else if (run && !token) {
      approval.note = '只有启动 Runner 的人能批准：请用 Runner 启动时在终端打印的链接（operator link）打开本页，链接里带着这次启动的令牌。' +
        '这里显示的是 trace 里的命令（工作区外的路径显示为 <path>）。';
    } else if (run) {
      approval.note = '正在向 Runner 读取这个问题（完整命令与真实路径）……';
    } else {
      approval.note = '';
    }
    $('approval-note').textContent = approval.note;
    setApprovalButtons(!!approval.id && (!run || !!token));
    card.hidden = false;
    if (!approvalTimer) approvalTimer = setInterval(tickApproval, 250);
    tickApproval();
  }

  function hideApproval() {
    $('approval-card').hidden = true;
    approval.seq = null;
    approval.id = null;
    if (approvalTimer) { clearInterval(approvalTimer); approvalTimer = null; }
  }

  function tokenProblem(res) {
    return res.status === 401 || res.status === 403
      ? 'Runner 不接受这个页面的回答（' + res.error.code + '）：令牌缺失或不是这次启动的（Runner 每次启动都换新令牌）。请用 Runner 这次启动时打印的链接重新打开本页。'
      : '未能读取或发送：' + res.error.code + ' · ' + res.error.message;
  }

  /** With the operator token, replace the trace's view of the question by the runner's own copy. */
  async function loadOperatorQuestion(run, seq) {
    const token = operatorToken(run.runnerBase);
    if (!token) return;
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const res = await runnerFetch(run.runnerBase, '/agent/runs/' + encodeURIComponent(run.id) + '/approvals', { token });
      if (approval.seq !== seq) return;  // the run moved on
      if (!res.ok) { $('approval-note').textContent = tokenProblem(res); return; }
      const list = (res.data && res.data.approvals) || [];
      if (list.length) { showApproval({ ...list[list.length - 1], seq }, run); return; }
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }

  function renderApproval(run, events) {
    const pending = TERMINAL.has(run.status) ? null : pendingApproval(events);
    if (!pending) { hideApproval(); return; }
    if (approval.seq === pending.seq) return;  // shown already (perhaps as the operator's copy)
    showApproval(pending, run);
    loadOperatorQuestion(run, pending.seq);
  }

  /** The operator's answer: POST /agent/runs/{id}/approvals/{approval_id} with the token (once; the
   *  runner checks the token, the deadline and that the question belongs to this run). */
  async function answerApproval(decision) {
    if (!approval.id || approval.sent || !approval.runId) return;
    const token = operatorToken(approval.runnerBase);
    if (!token) return;
    approval.sent = true;
    setApprovalButtons(false);
    const id = approval.id;
    const res = await runnerFetch(approval.runnerBase, '/agent/runs/' + encodeURIComponent(approval.runId) +
      '/approvals/' + encodeURIComponent(id), { method: 'POST', body: { decision }, token });
    if (approval.id !== id) return;
    $('approval-note').textContent = res.ok
      ? '已发送：' + (decision === 'approve' ? '批准' : '拒绝') + '。等待 Runner 继续……'
      : tokenProblem(res);
  }

  // Approvals: end of the block.
  // ==========================================================================================

  function renderFinal(run) {
    const box = $('run-final');
    $('run-explain-btn').disabled = !TERMINAL.has(run.status) || !!S.explaining;
    if (!TERMINAL.has(run.status)) { box.hidden = true; return; }
    box.hidden = false;
    const parts = [el('div', { class: 'final-title' }, '终态：', el('strong', { text: run.status + ' / ' + (run.stopReason || '?') }))];
    if (run.final && run.final.answer) {
      parts.push(el('div', { class: 'final-answer', text: run.final.answer }));
      parts.push(el('div', { class: 'small mono', text: 'evidence_ids: ' + (run.final.evidence_ids || []).join(', ') }));
    } else {
      parts.push(el('div', { class: 'muted small', text: '没有被接受的 Final Answer。' }));
      if (run.unverified && run.unverified.answer) {  // the best refused candidate, never shown as an answer
        parts.push(el('div', { class: 'muted small', text: '未核验的候选（未采纳）：' + run.unverified.answer }));
        parts.push(el('div', { class: 'small mono', text: '未通过：' + (run.unverified.unverified || []).join('; ') }));
      }
    }
    if (run.error) parts.push(el('div', { class: 'error-text', text: 'error: ' + (run.error.code || '') + ' · ' + (run.error.message || '') }));
    if (run.testPolicy) parts.push(el('span', { class: 'tp-badge small', text: TEST_POLICY_LABEL }));
    clear(box, parts);
  }

  function shortJSON(value, limit) {
    const text = JSON.stringify(value);
    return text && text.length > (limit || 220) ? text.slice(0, limit || 220) + '…' : text;
  }

  function observationLine(obs) {
    if (!obs) return '';
    if (obs.ok) {
      const r = obs.result || {};
      if (r.summary) return r.summary;
      if ('value' in r) return r.expression + ' = ' + r.value;
      if ('exit_code' in r) {  // bash: the command, its exit and its grade (the output is in the trace)
        return '$ ' + r.command + ' → ' + (r.timed_out ? 'timed out' : 'exit ' + r.exit_code) +
          (r.risk ? ' · ' + levelText(r.risk.level) + ' · ' + (r.risk.reason || '') : '');
      }
      return shortJSON(r);
    }
    const err = obs.error || {};
    return (err.code || 'error') + ': ' + (err.message || '');
  }

  /** Timeline: one card per step, Decision Summary → Action → Observation → next state. */
  function renderTimeline(events) {
    const box = $('timeline');
    const steps = new Map();
    const head = [];
    for (const e of events) {
      if (!e.step) { head.push(e); continue; }
      if (!steps.has(e.step)) steps.set(e.step, []);
      steps.get(e.step).push(e);
    }
    if (!events.length) {
      clear(box, el('p', { class: 'muted', text: S.run ? 'Job 已创建，等待第一个事件…' : '真实 Run 启动后，这里才会出现 Decision Summary → Action → Observation → next state。' }));
      return;
    }
    const cards = [];
    const turn = turnOfRun(S.run);
    if (turn && turn.turn > 1) {  // a follow-up: its question first, then its steps like any run's
      cards.push(el('div', { class: 'tl-card tl-head tl-turn' }, el('div', { class: 'tl-step', text: '第 ' + turn.turn + ' 轮' }),
        el('div', { class: 'tl-body' }, el('div', { class: 'tl-row' }, el('span', { class: 'tl-k', text: '追问' }),
          el('span', { class: 'tl-v', text: turn.message })))));
    }
    const load = head.filter((e) => e.type.startsWith('model.load'));
    if (load.length) {
      const last = load[load.length - 1];
      const model = last.model || {};
      cards.push(el('div', { class: 'tl-card tl-head' }, el('div', { class: 'tl-step', text: '加载' }),
        el('div', { class: 'tl-body' }, el('div', { class: 'tl-row' }, el('span', { class: 'tl-k', text: last.type }),
          last.type === 'model.load.completed'
            ? [model.name || '', ' · ', model.backend || '', ' · ', model.device || '', ' · ', (last.load_ms ?? '?') + ' ms',
              model.is_test_policy ? el('span', { class: 'tp-badge small', text: TEST_POLICY_LABEL }) : null]
            : (last.message || '')))));
    }
    for (const [step, list] of [...steps.entries()].sort((a, b) => a[0] - b[0])) {
      const rows = [];
      for (const e of list) {
        const row = timelineRow(e);
        if (row) rows.push(row);
      }
      const lastModel = [...list].reverse().find((e) => e.type.startsWith('model.'));
      if (lastModel && lastModel.type.endsWith('.started')) {
        const running = S.run && !TERMINAL.has(S.run.status);
        rows.push(el('div', { class: 'tl-row tl-model' }, el('span', { class: 'tl-k', text: 'Model' }),
          el('span', { class: running ? 'tl-v state-active' : 'tl-v muted',
            text: (running ? '生成中… ' : '未完成（运行已结束） ') + (lastModel.branch || '') + (lastModel.tool ? ' · ' + lastModel.tool : '') })));
      }
      cards.push(el('div', { class: 'tl-card', dataset: { step: String(step) } },
        el('div', { class: 'tl-step', text: 'Step ' + step }), el('div', { class: 'tl-body' }, rows)));
    }
    clear(box, cards);
  }

  function timelineRow(e) {
    const row = (kind, label, ...content) => el('div', { class: 'tl-row tl-' + kind }, el('span', { class: 'tl-k', text: label }),
      el('span', { class: 'tl-v' }, ...content));
    switch (e.type) {
      case 'decision.valid': case 'decision.repaired': {
        const d = e.decision || {};
        const act = d.type === 'action' ? d.tool + ' ' + shortJSON(d.arguments, 260) : 'final · evidence_ids ' + shortJSON(d.evidence_ids);
        return el('div', {}, row('summary', 'Decision Summary', el('span', { text: e.decision_summary || '—' })),
          row('decision', e.type === 'decision.repaired' ? 'Decision（已修复）' : 'Decision（模型提议）', el('code', { text: act })));
      }
      case 'decision.invalid':
        return row('bad', 'decision.invalid', el('span', { text: (e.code || '') + ' · ' + (e.error || e.message || '') +
          (e.missing_fields ? ' · missing ' + shortJSON(e.missing_fields) : '') + (e.unexpected_fields ? ' · unexpected ' + shortJSON(e.unexpected_fields) : '') }));
      case 'model.failed':
        return row('bad', 'model.failed', el('span', { text: (e.code || '') + ' · ' + (e.message || '') }));
      case 'model.completed': case 'model.repair.completed': {
        const u = e.usage || {};
        return row('model', e.type === 'model.repair.completed' ? 'Model（repair）' : 'Model',
          el('span', { text: (u.input_tokens ?? '?') + ' in / ' + (u.output_tokens ?? '?') + ' out tokens' +
            (u.forced_tokens ? '（' + u.forced_tokens + ' forced）' : '') +
            (u.drafted_tokens ? '（' + u.drafted_tokens + ' from a draft）' : '') + ' · ' +
            ((e.latency_ms ?? 0) / 1000).toFixed(2) + ' s · ' + (e.finish_reason || '') + ' · output sha256 ' +
            String(e.output_sha256 || '').slice(0, 12) + '…' }));
      }
      case 'tool.started':
        return row('action', 'Action（已校验）' + (e.attempt > 1 ? ' · attempt ' + e.attempt : ''), el('code', { text: e.tool + ' ' + shortJSON(e.arguments, 260) }));
      case 'tool.retry': case 'tool.failed':
        return row('bad', e.type, el('span', { text: ((e.error || {}).code || '') + ' · ' + ((e.error || {}).message || '') }));
      case 'tool.rejected': case 'tool.observation': {
        const obs = e.observation || {};
        const count = e.state_delta && e.state_delta.observation_count;
        return el('div', {},
          row(obs.ok ? 'obs' : 'bad', e.type === 'tool.rejected' ? 'Observation（参数被拒绝）' : 'Observation',
            el('code', { text: (obs.id || '') + ' · ok=' + obs.ok }), ' ', el('span', { text: observationLine(obs) })),
          count !== undefined ? row('next', 'next state', el('span', { text: 'observation_count = ' + count })) : null);
      }
      case 'approval.requested':
        return row('ask', '等待批准', el('code', {}, visibleNodes(e.command)), ' ',
          el('span', { text: levelText(e.level) + ' · ' }, visibleNodes(e.reason)));
      case 'approval.decided':
        return row(e.decision === 'run' ? 'obs' : 'bad', 'bash 风险评级', el('code', {}, visibleNodes(e.command)), ' ',
          el('span', { text: levelText(e.level) + ' · ' }, visibleNodes(e.reason), ' → ' + (DECISION_TEXT[e.decision] || e.decision) +
            '（' + (BY_TEXT[e.by] || e.by || '') + (e.channel && CHANNEL_TEXT[e.channel] ? '，' + CHANNEL_TEXT[e.channel] : '') + '）'));
      case 'fix.trial':
        return row(e.passed ? 'obs' : 'bad', '修复试跑', el('span', { text: '第 ' + e.trial + ' 次：在工作区副本上按诊断改 ' +
          String(e.function || '') + (e.fix ? '（' + (e.named ? '由运行时指定的行 ' : '') + '`' + String(e.line || '') + '` → `' +
          String(e.fix) + '`' + (e.written ? '，模型原写 `' + String(e.written) + '`，截到能解析为 Python 的最长前缀' : '') + '）' : '') + (e.refused ? ' → 未试跑：这个修改什么也没改变（' + (e.summary || '') + '）'
            : ' 并运行测试 → ' + (e.passed ? '测试通过' : '未通过（' + (e.summary || '') + '）')) }));
      case 'final.validated':
        return row(e.accepted ? 'obs' : 'bad', 'final.validated', el('span', { text: (e.accepted ? '✓ ' : '✗ ') + (e.message || '') }));
      case 'guard.loop_detected': case 'guard.no_progress':
        return row('bad', e.type, el('span', { text: (e.code || '') + ' ' + shortJSON(e.repeated_action || e.validator_error || { count: e.count }) }));
      case 'run.finished':
        return row('end', 'run.finished', el('span', { text: e.status + ' / ' + e.stop_reason }));
      case 'session.compacted':
        return row('model', 'session.compacted', el('span', { text: e.method === 'failed'
          ? '对话未压缩（' + (e.fallback_reason || '') + '），本轮照常进行'
          : '对话已压缩：' + (e.method || '') + (e.fallback_reason ? '（未用摘要：' + e.fallback_reason + '）' : '') +
            ' · 消息 ' + e.messages_before + ' → ' + e.messages_after +
            ' · tokens ' + e.tokens_before + ' → ' + e.tokens_after }));
      default:
        return null;
    }
  }

  // Metrics cards ----------------------------------------------------------------------------

  const METRICS = [
    { key: 'task_success', title: 'Task Success', note: '由 expected.json 确定性验收，不由 LLM 自评', fmt: 'bool' },
    { key: 'valid_action_rate', title: 'Valid Action Rate', note: '参数通过校验的 Action / 已解析 Action', fmt: 'pct' },
    { key: 'tool_argument_accuracy', title: 'Tool/Argument Accuracy', note: '工具与语义参数同时正确', fmt: 'pct' },
    { key: 'recovery_rate', title: 'Recovery Rate', note: '已恢复 / 可恢复错误', fmt: 'pct' },
    { key: 'loop_rate', title: 'Loop Rate', note: '触发循环 guard 的指示量 / Action', fmt: 'pct' },
    { key: 'termination_correctness', title: 'Termination Correctness', note: '证据齐全才 Final；异常时正确停止', fmt: 'bool' },
    { key: 'steps', title: 'Steps', note: '外层 Decision 轮数', fmt: 'steps' },
    { key: 'total_latency_ms', title: 'Latency', note: '本地墙钟时间（模型 / 工具）', fmt: 'latency' },
    { key: 'input_tokens', title: 'Tokens', note: 'tokenizer 统计的 input / output', fmt: 'tokens' },
    { key: 'cost_units', title: 'Cost Units', note: '(input + 2×output) / 1000，不是货币账单', fmt: 'cost' },
  ];

  function metricValue(m, spec) {
    const v = m[spec.key];
    const na = { text: 'N/A', sub: '分母为 0 或不适用' };
    switch (spec.fmt) {
      case 'bool': return v === null || v === undefined ? na : { text: v ? 'PASS' : 'FAIL', cls: v ? 'good' : 'bad' };
      case 'pct': return v === null || v === undefined ? na : { text: (v * 100).toFixed(v * 100 % 1 ? 1 : 0) + '%' };
      case 'steps': return v === null || v === undefined ? na : { text: String(v), sub: 'model calls ' + (m.model_calls ?? '—') + ' · tool calls ' + (m.tool_calls ?? '—') };
      case 'latency': return v === null || v === undefined ? na : { text: (v / 1000).toFixed(2) + ' s',
        sub: '模型 ' + ((m.model_latency_ms ?? 0) / 1000).toFixed(2) + ' s · 工具 ' + ((m.tool_latency_ms ?? 0) / 1000).toFixed(2) + ' s' };
      case 'tokens': return v === null || v === undefined ? na : { text: v + ' / ' + (m.output_tokens ?? '—'), sub: 'input / output' };
      case 'cost': return v === null || v === undefined ? na : { text: Number(v).toFixed(3) };
      default: return na;
    }
  }

  function renderMetrics(run) {
    const box = $('metrics');
    const finished = run && TERMINAL.has(run.status);
    const m = run && run.metrics;
    clear(box, METRICS.map((spec) => {
      let value;
      if (!run) value = { text: spec.fmt === 'steps' ? '—' : '未运行' };
      else if (!finished) value = { text: '运行中…', cls: 'muted' };
      else if (!m) value = { text: 'N/A', sub: '本次运行没有指标（metrics = null）' };
      else value = metricValue(m, spec);
      return el('div', { class: 'metric', dataset: { metric: spec.key } },
        el('div', { class: 'metric-title', text: spec.title }),
        el('div', { class: 'metric-value ' + (value.cls || ''), text: value.text }),
        el('div', { class: 'metric-note', text: value.sub || spec.note }));
    }));
  }

  // Chart ------------------------------------------------------------------------------------

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** SVG bar chart with an optional average line, drawn from a plot spec. */
  function drawSpec(spec) {
    const labels = Array.isArray(spec.labels) ? spec.labels.map(String) : [];
    const values = Array.isArray(spec.values) ? spec.values.map(Number) : [];
    const n = Math.min(labels.length, values.length);
    const W = 560, H = 300, left = 48, right = 78, top = 36, bottom = 44;
    const avg = typeof spec.average === 'number' ? spec.average : null;
    const maxV = Math.max(1, ...values.slice(0, n), avg ?? 0);
    const minV = Math.min(0, ...values.slice(0, n));
    const step = niceStep((maxV - minV) / 5);
    const lo = Math.floor(minV / step) * step;
    const hi = Math.ceil((maxV * 1.05) / step) * step;
    const span = hi - lo || 1;
    const y = (v) => top + (H - top - bottom) * (1 - (v - lo) / span);
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'spec-chart', role: 'img', 'aria-label': spec.title || 'plot' });
    root.append(svg('text', { x: (left + W - right) / 2, y: 20, 'text-anchor': 'middle', class: 'c-title' }, spec.title || ''));
    for (let v = lo; v <= hi + step / 1000; v += step) {
      root.append(svg('line', { x1: left, x2: W - right, y1: y(v), y2: y(v), class: 'c-grid' }));
      root.append(svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'c-tick' }, Math.round(v * 100) / 100));
    }
    const band = (W - left - right) / Math.max(1, n);
    for (let i = 0; i < n; i += 1) {
      const x = left + band * i + band * 0.18;
      const h = Math.abs(y(values[i]) - y(0));
      const bar = svg('rect', { x, y: Math.min(y(values[i]), y(0)), width: band * 0.64, height: Math.max(1, h), class: 'c-bar' });
      bar.append(svg('title', {}, labels[i] + ': ' + values[i]));
      root.append(bar);
      root.append(svg('text', { x: x + band * 0.32, y: Math.min(y(values[i]), y(0)) - 5, 'text-anchor': 'middle', class: 'c-val' }, values[i]));
      root.append(svg('text', { x: x + band * 0.32, y: H - bottom + 16, 'text-anchor': 'middle', class: 'c-label' },
        labels[i].length > 14 ? labels[i].slice(0, 13) + '…' : labels[i]));
    }
    root.append(svg('line', { x1: left, x2: W - right, y1: y(0), y2: y(0), class: 'c-axis' }));
    if (avg !== null) {
      root.append(svg('line', { x1: left, x2: W - right, y1: y(avg), y2: y(avg), class: 'c-avg' }));
      root.append(svg('text', { x: W - right + 6, y: y(avg) + 4, 'text-anchor': 'start', class: 'c-avg-label' }, 'average ' + avg));
    }
    if (spec.y_label) {
      root.append(svg('text', { x: 14, y: (top + H - bottom) / 2, transform: `rotate(-90 14 ${(top + H - bottom) / 2})`,
        'text-anchor': 'middle', class: 'c-tick' }, spec.y_label));
    }
    return root;
  }

  /** 1, 2, 2.5 or 5 times a power of ten: readable axis ticks. */
  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
    return [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  }

  async function sha256Hex(buffer) {
    if (!window.crypto || !crypto.subtle) return null;
    const digest = await crypto.subtle.digest('SHA-256', buffer);
    return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
  }

  function renderChart(run, events) {
    const plotEvent = [...events].reverse().find((e) => e.type === 'tool.observation' && e.observation &&
      e.observation.ok && e.observation.tool === 'plot');
    if (!plotEvent) {
      const msg = TERMINAL.has(run.status) ? '本次运行没有成功的 plot Observation' : '等待 plot Observation…';
      clear($('chart'), el('span', { class: 'state-idle', text: msg }));
      if (!run.pngFor) clear($('chart-png'), el('span', { class: 'state-idle', text: msg }));
      return;
    }
    const result = plotEvent.observation.result || {};
    clear($('chart'), drawSpec(result.spec || {}));
    const artifact = result.artifact || {};
    if (artifact.id && run.pngFor !== artifact.id) {
      run.pngFor = artifact.id;
      loadPng(run, artifact);
    }
  }

  async function loadPng(run, artifact) {
    const box = $('chart-png');
    clear(box, el('span', { class: 'state-active', text: '正在读取 PNG…' }));
    const url = run.runnerBase + '/agent/runs/' + encodeURIComponent(run.id) + '/artifacts/' + encodeURIComponent(artifact.id);
    try {
      const response = await fetch(url, { cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' });
      if (!response.ok) throw new Error('HTTP ' + response.status);
      const buffer = await response.arrayBuffer();
      if (S.run !== run) return;
      const blob = new Blob([buffer], { type: 'image/png' });
      const img = el('img', { id: 'chart-png-img', alt: 'plot artifact ' + artifact.id, src: URL.createObjectURL(blob) });
      clear(box, img);
      const digest = await sha256Hex(buffer);
      const match = digest && artifact.sha256 ? (digest === artifact.sha256 ? '✓ SHA-256 与 trace 中的 artifact metadata 一致' : '✗ SHA-256 不一致') : '';
      $('chart-png-meta').textContent = artifact.id + ' · ' + buffer.byteLength + ' bytes · ' + (artifact.media_type || '') + ' ' + match;
    } catch (e) {
      if (S.run !== run) return;
      clear(box, el('span', { class: 'state-bad', text: '无法读取 PNG：' + e.message }));
    }
  }

  async function cancelRun() {
    const run = S.run;
    if (!run || !runActive()) return;
    $('run-cancel').disabled = true;
    const res = await runnerFetch(run.runnerBase, '/agent/runs/' + encodeURIComponent(run.id) + '/cancel', { method: 'POST', body: {} });
    if (!res.ok) {
      $('run-error').hidden = false;
      $('run-error').textContent = '取消失败：' + res.error.code + ' · ' + res.error.message;
      $('run-cancel').disabled = !runActive();
    }
  }

  /** Ask the runner's model to explain the finished run; its words stream in, labelled as such. */
  async function explainRun() {
    const run = S.run;
    if (!run || !TERMINAL.has(run.status) || S.explaining) return;
    const out = $('run-explain');
    out.hidden = false;
    S.explaining = true;
    $('run-explain-btn').disabled = true;
    clear(out, [el('div', { class: 'muted small', text: '模型正在阅读 trace 摘要并解释……' })]);
    const fail = (message) => clear(out, [el('div', { class: 'error-text', text: '未能解释：' + message })]);
    try {
      let response;
      try {
        response = await fetch(run.runnerBase + '/agent/runs/' + encodeURIComponent(run.id) + '/explain', {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify(Object.assign({}, modelFields(), { language: 'zh' })),
          cache: 'no-store', credentials: 'omit', mode: 'cors', referrerPolicy: 'no-referrer' });
      } catch (e) {
        fail('runner not reachable');
        return;
      }
      if (!response.ok) {
        let data = null;
        try { data = await response.json(); } catch (e) { data = null; }
        const err = (data && data.error) || { code: 'http_' + response.status, message: '' };
        fail(err.code + (err.message ? ' · ' + err.message : ''));
        return;
      }
      const label = el('div', { class: 'muted small', text: '模型的话（不是事实；以 trace 为准）' });
      const text = el('div', { class: 'explain-text' });
      clear(out, [label, text]);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, cut).trim();
          buffer = buffer.slice(cut + 1);
          if (!line) continue;
          const msg = JSON.parse(line);
          if (msg.delta) text.textContent += msg.delta;
          if (msg.done && msg.error) fail(msg.error.code + ' · ' + (msg.error.message || ''));
          else if (msg.done) { text.textContent = msg.explanation; label.textContent = msg.label; }
        }
      }
    } finally {
      S.explaining = false;
      $('run-explain-btn').disabled = !(S.run && TERMINAL.has(S.run.status));
    }
  }

  // Follow-up questions ----------------------------------------------------------------------
  // The first follow-up makes the page's run turn 1 of a runner session (POST /agent/sessions with
  // from_run); each follow-up is the session's next turn (POST /agent/sessions/{id}/turns), a run of
  // its own that the page follows like any run, whose Final may cite the earlier turns' evidence.
  // S.session = {id, runnerBase, turns: [{turn, message, runId, final, status}]}.

  function turnOfRun(run) {
    return S.session && run ? S.session.turns.find((t) => t.runId === run.id) || null : null;
  }

  function followupBlockers(run) {
    const reasons = [];
    if (!run || !TERMINAL.has(run.status)) reasons.push('等这一轮运行结束');
    if (!S.runner || !run || run.runnerBase !== S.runner) reasons.push('先连接运行这次 Run 的 Runner');
    else if (!S.inspect || !S.inspect.ok || S.inspect.key !== inspectKey()) reasons.push('先检查模型（“检查模型”通过后才能追问）');
    if (!S.session && !checkBudgets().ok) reasons.push('预算超出允许范围');
    if (S.sending) reasons.push('正在提交追问');
    return reasons;
  }

  function renderFollowup(run) {
    const box = $('followup');
    const current = turnOfRun(run);
    if (current) {
      current.status = run.status;
      if (TERMINAL.has(run.status)) current.final = run.final;
    }
    box.hidden = !(run && (TERMINAL.has(run.status) || current));
    if (box.hidden) return;
    clear($('followup-turns'), (S.session ? S.session.turns : []).map((t) => el('li', { dataset: { turn: String(t.turn) } },
      el('div', { class: 'ft-head', text: '第 ' + t.turn + ' 轮 · ' + (STATUS_TEXT[t.status] || t.status || '') + (t.runId ? ' · run ' + t.runId : '') }),
      el('div', { class: 'ft-message', text: '问：' + t.message }),
      el('div', { class: 'ft-answer', text: t.final && t.final.answer ? '答：' + t.final.answer
        : (TERMINAL.has(t.status) || t.status === 'finished' ? '没有被接受的 Final Answer' : '进行中…') }))));
    const blockers = followupBlockers(run);
    $('followup-send').disabled = blockers.length > 0 || !$('followup-input').value.trim();
    const state = $('followup-state');
    state.className = S.followupError ? 'error-text small' : 'muted small';
    state.textContent = S.followupError || (blockers.length ? '暂不能追问：' + blockers.join('；')
      : S.session ? '会话 ' + S.session.id + ' · 已有 ' + S.session.turns.length + ' 轮；下一轮可以引用前几轮的证据。'
        : '追问会让这次运行成为一个会话的第 1 轮，再运行第 2 轮。');
  }

  async function sendFollowup() {
    const run = S.run;
    const message = $('followup-input').value.split(/\s+/).filter(Boolean).join(' ');
    if (!message || followupBlockers(run).length) { renderFollowup(run); return; }
    const failed = (what, res) => what + (res.error ? res.error.code + ' · ' + res.error.message : '响应缺少 id');
    S.sending = true;
    S.followupError = '';
    renderFollowup(run);
    try {
      if (!S.session) {
        const res = await runnerFetch(run.runnerBase, '/agent/sessions', { method: 'POST',
          body: { ...modelFields(), budgets: checkBudgets().budgets, from_run: run.id } });
        if (S.run !== run) return;
        if (!res.ok || !res.data || !res.data.id) { S.followupError = failed('未能创建会话：', res); return; }
        S.session = { id: String(res.data.id), runnerBase: run.runnerBase,
          turns: (res.data.turns || []).map((t) => ({ turn: Number(t.turn), message: String(t.message || ''),
            runId: t.run_id ? String(t.run_id) : null, final: t.final || null, status: t.run_id === run.id ? run.status : t.state })) };
      }
      const session = S.session;
      const res = await runnerFetch(session.runnerBase, '/agent/sessions/' + encodeURIComponent(session.id) + '/turns',
        { method: 'POST', body: { message, ...modelFields() } });
      if (S.session !== session) return;
      if (!res.ok || !res.data || !res.data.run_id) { S.followupError = failed('追问未开始：', res); return; }
      const last = session.turns[session.turns.length - 1];
      session.turns.push({ turn: (last ? last.turn : 0) + 1, message, runId: String(res.data.run_id), final: null,
        status: (res.data.run && res.data.run.status) || 'queued' });
      $('followup-input').value = '';
      S.run = newRun(String(res.data.run_id), res.data.run && res.data.run.status);
      $('run-explain').hidden = true;
      renderRun();
      follow(S.run);
    } finally {
      S.sending = false;
      updateStartButton();
    }
  }

  function exportTrace() {
    const run = S.run;
    if (!run) return;
    const payload = stripHidden({
      run_id: run.id, runner: run.runnerBase, runner_version: S.status ? S.status.version : null,
      test_policy: !!run.testPolicy, status: run.status, stop_reason: run.stopReason,
      exported_at: new Date().toISOString(), events: sortedEvents(run),
    });
    const blob = new Blob([JSON.stringify(payload, null, 2)], { type: 'application/json' });
    const a = el('a', { href: URL.createObjectURL(blob), download: 'react-agent-trace-' + run.id + '.json' });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  // ------------------------------------------------------------------------------------------
  // Source browser
  // ------------------------------------------------------------------------------------------

  const ROLES = [
    { key: 'root', title: '根目录 · 准备、发布与启动', text: '告诉用户怎样安装依赖、显式下载模型、核对包版本，并用自己指定的 Python 启动 4890。' },
    { key: 'agent', title: 'agent/ · 真实运行实现', text: '从 HTTP Job 到模型适配、严格协议、工具执行与 state → action → observation 循环的核心代码。' },
    { key: 'contracts', title: 'prompts/ + schemas/ · LLM 契约', text: '前者告诉模型当前只能怎样续写，后者以机器可读形式公开 Decision 与工具参数边界。' },
    { key: 'knowledge', title: 'knowledge/ + data/ · 事实与评分分离', text: 'knowledge 是 Agent 经工具可见的事实；expected 是 LLM 不可见的验收标准。' },
    { key: 'tests', title: 'tests/ · 可执行回归', text: '不下载大模型即可验证完整闭环、错误恢复、预算、循环检测、安全边界与评分隔离。' },
    { key: 'other', title: '其他文件夹', text: '不属于上面四种角色的文件，按所在文件夹列出。' },
  ];

  const EXPLAIN = {
    'README.md': ['包的使用说明：安装依赖、下载模型、启动 Runner、运行测试。', '按步骤给出命令，并说明 4890 端口、loopback 边界与模型目录的选择。', '学习者的入口：读完它再运行 run.sh / run.ps1 与 download_model.py。'],
    'requirements.txt': ['Runner 与 Agent 运行所需的 Python 依赖。', '固定 pydantic、FastAPI/uvicorn、Matplotlib、BM25 检索与本地推理后端（llama.cpp）的版本范围。', '依赖装进你选择的解释器；/status 与 /models/inspect 检查的正是这个解释器。'],
    'requirements-dev.txt': ['开发与测试依赖。', '在运行依赖之上加 pytest、hypothesis、schemathesis、playwright 等。', '只在运行 tests/ 时需要，Runner 本身不依赖它们。'],
    'download_model.py': ['显式下载 Qwen2.5 模型到用户选择的目录，并写出来源清单。', '记录 repository、resolved revision、文件名、字节数与 SHA-256；下载后校验哈希。', '模型只在你运行它时下载；Runner 之后只从本地文件加载，不会自行联网。'],
    'algolab_local_runner.py': ['Runner 的薄启动入口。', '不猜测环境，只解析参数并转交 agent/runner/server.py 的 main，固定绑定 127.0.0.1:4890。', '浏览器实验三连接的就是它启动的 HTTP 服务。'],
    'run.sh': ['Linux / macOS 启动脚本。', '只使用用户给定的 Python 解释器启动 Runner，不去猜虚拟环境。', '→ algolab_local_runner.py → agent/runner/server.py。'],
    'run.ps1': ['Windows PowerShell 启动脚本。', '与 run.sh 相同：用明确指定的 Python 启动 Runner。', '→ algolab_local_runner.py → agent/runner/server.py。'],
    'manifest.json': ['包的静态版本声明（名称、版本、模块号）。', '只声明版本；逐文件 bytes/SHA-256、tree SHA 与 ZIP SHA 由课程服务器从实时文件计算。', '页面顶部显示的 version 就来自这里。'],
    'task.json': ['默认任务包的任务说明：目标、必需工具与模式。', 'TaskSpec 校验它的字段；required_tools 决定证据门要求哪些工具的成功 Observation。', 'Runtime 读它组装 TASK；expected.json 不在这里。'],
    'agent/__init__.py': ['agent 包的入口。', '保持轻量：不导入 torch、transformers 或 llama_cpp，import agent 总能成功。', '被 Runner、测试与命令行共同导入。'],
    'agent/__main__.py': ['命令行入口（python -m agent）。', '可在终端直接跑一次任务或重新生成 schemas/*.json。', '与 Runner 使用同一个 Runtime。'],
    'agent/cli/main.py': ['命令行运行一次任务。', '解析模型路径、任务包与预算参数，调用同一个 run_agent，并可输出 JSON 结果。', '不经过 HTTP：终端里复现浏览器实验三的同一条行动链。'],
    'agent/tools/schemas.py': ['生成与核对 schemas/*.json。', '从 contracts.py 的类型导出 Decision schema 与工具注册表（含 timeout_seconds），测试用它证明文件与代码一致。', 'contracts.py → schemas.py → schemas/decision.schema.json、schemas/tool_registry.json。'],
    'pytest.ini': ['测试配置。', '声明测试目录、标记与超时等 pytest 选项。', '运行 python -m pytest 时生效，与 Runner 运行无关。'],
    'agent/contracts/decision.py': ['Decision 与 Observation 的类型化契约（预算、任务包、运行结果在 contracts/ 的相邻模块，HTTP 请求体在 runner/requests.py）。', 'Decision 是 action | final 的封闭联合，extra="forbid" 拒绝 reasoning 等多余字段；工具参数的长度、范围与等长约束都在这里。', 'schemas/*.json 由它生成；Runtime、prompt 与 grammar 都从这里取 schema。'],
    'agent/core/runtime.py': ['行动循环中枢：预算 → 生成 → 解析/修复 → 校验 → 循环保护 → 分派/重试 → Observation → 下一轮。', '执行 Final 证据门、三类 loop guard、工具超时与重试，每个 Job 以一条 run.finished 封口。', '它是唯一写 Observation 的地方；调用 model_policy 取候选 Decision，调用 tools 执行动作。'],
    'agent/models/decisions.py': ['把模型续写的文本解析成 Decision。', '拼接 Runtime 前缀与模型输出，做精确字段检查，给出 code、缺失/意外字段数量（不含字段值）。', '解析失败 → decision.invalid → 同一步 repair。'],
    'agent/models/model_policy.py': ['Runtime 与模型之间的一个方法接缝：ModelRequest → Generation。', '请求携带 messages、JSON 前缀、当前值的 schema、deadline 与取消事件；结果只返回文本与 token 用量。', '各后端（backends/*.py）实现它；Runtime 不知道底下是哪种模型。'],
    'agent/tools/__init__.py': ['工具注册表：参数校验、分派契约与结果摘要。', '把三个工具绑定到各自的参数模型、超时与稳定 digest；ToolError 带 retryable，ArgumentError 只含字段名。', 'Runtime 在分派前调用 validate，在 no-progress guard 中使用 digest。'],
    'agent/tools/knowledge.py': ['knowledge_search 的实现：只检索包内 knowledge/*.md。', '切块、BM25 排序、返回 citations（source_id、chunk_id、source_sha256）并从 markdown 表格与规则行解析 data。', '它的 data 成为 Observation；换一份知识文件就得到不同的数据，没有写死的数字。'],
    'agent/tools/calculator.py': ['calculator 的实现：AST 白名单的精确算术。', '只允许数字、+ - * /、一元正负与括号；限制长度、节点数、深度与数值大小；异常都变成结构化工具错误。', '模型写出表达式，它给出 value——79 必须来自这里而不是模型心算。'],
    'agent/tools/plotting.py': ['plot 的实现：Matplotlib Agg 画柱状图并保存 PNG artifact。', '关闭 math text 解析，固定图幅与 DPI，最多 20 根柱子；trace 里只有 artifact metadata。', '页面既用 spec 画课程图，也从 /agent/runs/{id}/artifacts/{artifact_id} 取真实 PNG。'],
    'agent/contracts/trace.py': ['Execution trace：编号事件、800 条上限与隐私规则。', '每个事件带 seq、type、step、attempt、phase、elapsed_ms；写入前脱敏绝对路径与用户名；导出过滤隐藏推理键。', '页面按 after_seq 增量读取的就是这些事件。'],
    'agent/core/metrics.py': ['运行结束后的确定性指标。', '用 counters、usage 与 data/expected.json 计算 Task Success、Valid Action Rate 等；分母为 0 返回 null。', '只在 run.finished 之前被调用一次；expected.json 不进入 prompt 或工具。'],
    'agent/prompts/prompting.py': ['模型可见状态与当前分支的 JSON 前缀。', '任务、最近 10 条 Observation（每条约 3000 字符）、最近 4 条反馈与剩余预算，按只追加的顺序排布以复用 KV cache。', 'Runtime 每一步调用它组装 messages；Decision Summary 也在这里按缺口生成。'],
    'agent/task/packs.py': ['任务包：task.json + knowledge/ + data/expected.json。', 'default 包是包根目录；其他包位于 packs/<name>/，按名字查找。', 'Runner 的 /schema 列出可选任务包；页面的“任务包”下拉框来自这里。'],
    'agent/runner/server.py': ['Runner 的 loopback HTTP API。', 'status、schema、模型检查/卸载、创建/轮询/取消 Job、SSE 事件流与 artifact；Host 与 Origin 白名单、JSON content type、256 KiB 请求体上限、慢客户端的读超时。', '浏览器直接请求它；它把 Job 交给 job_store 串行执行。'],
    'agent/coding/runner_workspace.py': ['Runner 上工作区工具的边界。', '工作区目录、批准策略与期限都由启动 Runner 的人决定（--workspace、--approval、--approval-seconds）；自带模板的任务包总在运行目录里的新副本上工作；请求只能收紧策略、缩小工具，永远不能指定目录或关闭沙箱。', 'server.py 在排队前检查请求，job_store 据此生成每个 Job 的 WorkspaceOptions。'],
    'agent/coding/approvals.py': ['谁能批准一条有风险的命令。', 'ask_operator 先把 approval.requested 写进 trace，再等到期限；CLI 用终端 y/N，Runner 用 ApprovalDesk 等页面批准卡片的回答（每个问题只答一次、只属于一个 run、过期即拒绝）。', 'bash 工具评级后调用它；结果是 trace 里的 approval.decided。'],
    'agent/runner/job_store.py': ['异步 Job 的生命周期。', '维护 queued / running / 终态、取消事件与公开快照；queued 取消也会追加 run.finished。每个 Job 的事件只追加在内存列表里，读取从不等待 worker 或磁盘写入。', 'server.py 创建与查询 Job，worker 调用 runtime.run_agent；SSE 流在新事件到达时被唤醒。'],
    'agent/runner/streaming.py': ['运行事件的 Server-Sent Events。', '每个 trace 事件是一条 SSE 事件（id = seq）；断线后用 Last-Event-ID 或 after_seq 续传，不丢不重；同时打开的流有上限，不读数据的客户端会被超时断开。', '页面用 EventSource 跟随运行，打不开时退回 after_seq 轮询。'],
    'agent/runner/telemetry.py': ['可选的 OpenTelemetry 导出（默认关闭）。', '从 trace 事件生成 invoke_agent / chat / execute_tool span，属性遵循 GenAI 语义约定；不含模型原文、prompt、路径或秘密。', '设置 OTEL_EXPORTER_OTLP_ENDPOINT 或 --otel-file 时由 job_store 的事件观察者驱动。'],
    'data/expected.json': ['评分用的 ground truth。', '保存四个批次的数值、阈值、calculator=79、plot spec 与回答关键词、受保护的终止原因。', '只被 metrics.py 在运行结束后读取，永远不进入 LLM、检索结果或工具参数。'],
  };

  function explainFor(path) {
    if (EXPLAIN[path]) return EXPLAIN[path];
    const name = path.split('/').pop();
    const top = path.includes('/') ? path.split('/')[0] : '';
    if (path.startsWith('agent/models/backends/')) {
      if (name === '__init__.py') return ['后端注册与选择。', '按模型路径与可用依赖选择 llama.cpp 或 transformers 后端；重依赖只在各自模块内导入。', 'model_policy 的接缝之下：Runner 通过它得到一个 Policy。'];
      if (name.includes('llama')) return ['llama.cpp 后端（GGUF）。', '在 CPU 上快速推理；用 JSON schema 生成 grammar 约束输出，在 JSON 对象结束处停止，并复用前缀 KV cache。', '实现 Policy.generate，给 Runtime 返回续写文本与 token 用量。'];
      if (name.includes('transformers')) return ['Hugging Face transformers 后端。', '只用 local_files_only 从本地目录加载，不执行远程代码；应用 chat template 与 Runtime 前缀。', '实现 Policy.generate，给 Runtime 返回续写文本与 token 用量。'];
      if (name.includes('scripted')) return ['脚本化测试策略。', '按预先写好的输出逐步返回，用来确定性地测试 Runtime 的正常链与故障链。', '只用于测试；Runner 以它运行时会标明“测试策略”，绝不冒充真实模型。'];
      return ['一个模型后端。', '实现 model_policy 中的一个方法接缝（generate），重依赖只在本模块导入。', 'Runtime 通过 Policy 接口调用它。'];
    }
    if (top === 'prompts') {
      const which = { 'system.md': '系统提示：角色、工具列表与输出规则。', 'action.md': 'action 分支的指令：只补全当前工具的参数值。', 'final.md': 'final 分支的指令：引用证据写出答案。', 'repair.md': 'repair 提示：只给校验错误与 schema，不回灌无效正文。', 'tool_hints.md': '每个工具的一行使用提示。' }[name];
      return [which || 'prompt 模板。', '由 agent/prompts/prompting.py 读取并填入任务、Observation、反馈与预算。', '它约束模型能怎样续写；真正的校验仍由 contracts.py 与 Runtime 完成。'];
    }
    if (top === 'schemas') {
      const which = { 'decision.schema.json': 'Decision 的 JSON Schema：只有 action 与 final 两个分支。', 'tool_registry.json': '工具注册表：每个工具的参数 schema 与 timeout_seconds。' }[name];
      return [which || '机器可读的契约文件。', '由 agent/contracts/ 生成（python -m agent schemas --write），测试证明它与代码一致。', '公开 Decision 与参数边界，供阅读、grammar 与外部工具使用。'];
    }
    if (top === 'knowledge') return ['Agent 经 knowledge_search 可见的事实资料。', 'markdown 表格与规则行会被解析成 data（批次数值与发布规则）；文本按块检索并带 citation。', '只有被检索选中的片段与解析数据进入 Observation，整篇文件不会塞进 prompt。'];
    if (top === 'data') return ['评分数据。', '运行结束后供 metrics.py 复算指标。', '不进入 LLM、检索或工具参数。'];
    if (top === 'tests') return ['自动化测试。', '用脚本化测试策略驱动真实 Runtime，覆盖正常链、修复、重试、预算、循环检测、取消、HTTP 边界与隐私规则。', '不需要下载大模型即可运行（python -m pytest tests）。'];
    if (top === 'packs') return ['额外的任务包。', '每个包有自己的 task.json、knowledge/ 与 data/expected.json。', 'Runner 的 /schema 会列出它，页面可选择。'];
    if (top === 'bench') return ['多次运行的可靠性基准。', '在多个任务包上重复运行并汇总指标。', '与 Runner 使用同一个 Runtime。'];
    if (top) return ['位于 ' + top + '/ 的文件。', '这是示例包里的一个文件夹；页面没有为它准备专门说明。', '请阅读中列的完整内容了解它的作用。'];
    return ['包根目录中的文件。', '页面没有为它准备专门说明。', '请阅读中列的完整内容了解它的作用。'];
  }

  let manifest = null;
  let srcToken = 0;

  async function loadManifest() {
    let data;
    try {
      const response = await fetch('/api/react-agent/example/manifest', { cache: 'no-store' });
      data = await response.json();
      if (!response.ok) throw new Error((data.error && data.error.message) || 'HTTP ' + response.status);
    } catch (e) {
      $('manifest-state').textContent = '无法读取 manifest：' + e.message;
      clear($('src-tree'), el('span', { class: 'state-bad', text: '无法读取文件清单' }));
      return;
    }
    manifest = data;
    $('manifest-state').textContent = data.name + ' · ' + (data.module || '') + ' · ' + data.file_count + ' 个文件';
    kv($('manifest-info'), [
      ['version', el('span', { id: 'manifest-version', text: data.version || '—' })],
      ['ZIP SHA-256', el('span', { id: 'manifest-sha', class: 'mono', text: data.zip_sha256 })],
      ['tree SHA-256', el('span', { class: 'mono', text: data.tree_sha256 })],
      ['bytes', data.bytes + '（ZIP ' + data.zip_bytes + '）'],
      ['generated_at', data.generated_at],
    ]);
    $('zip-download').href = data.zip_path || '/api/react-agent/example.zip';
    renderTree();
    const first = data.files.find((f) => f.path === 'README.md') || data.files.find((f) => f.role === 'root') || data.files[0];
    if (first) openFile(first.path);
  }

  function renderTree() {
    const groups = new Map();
    for (const f of manifest.files) {
      const key = f.role === 'other' ? 'other:' + f.path.split('/')[0] : f.role;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(f);
    }
    const order = [...ROLES.map((r) => r.key).filter((k) => k !== 'other'), ...[...groups.keys()].filter((k) => k.startsWith('other:')).sort()];
    const nodes = [];
    for (const key of order) {
      const files = groups.get(key);
      if (!files) continue;
      const role = ROLES.find((r) => r.key === key) || { title: key.slice(6) + '/ · 其他文件夹', text: '不属于固定角色的文件夹，按通用说明展示。' };
      nodes.push(el('div', { class: 'src-group', dataset: { role: key } },
        el('div', { class: 'src-group-title' }, role.title, el('span', { class: 'count', text: files.length + ' files' })),
        el('div', { class: 'src-group-text', text: role.text }),
        el('ul', {}, files.map((f) => el('li', {}, el('button', { type: 'button', class: 'file', dataset: { path: f.path },
          title: f.path, onclick: () => openFile(f.path) }, f.path))))));
    }
    clear($('src-tree'), nodes);
  }

  async function openFile(path) {
    const entry = manifest && manifest.files.find((f) => f.path === path);
    if (!entry) return;
    const token = ++srcToken;
    for (const b of document.querySelectorAll('#src-tree button.file')) b.classList.toggle('current', b.dataset.path === path);
    $('src-path').textContent = path;
    $('src-meta').textContent = entry.language + ' · ' + entry.bytes + ' bytes · sha256 ' + entry.sha256;
    const dl = $('src-download');
    dl.href = entry.download_path;
    dl.setAttribute('download', path.split('/').pop());
    dl.hidden = false;
    const [role, detail, chain] = explainFor(path);
    clear($('src-explain'),
      el('h4', { text: path }),
      el('div', { class: 'ex-k', text: '作用' }), el('p', { text: role }),
      el('div', { class: 'ex-k', text: '关键实现' }), el('p', { text: detail }),
      el('div', { class: 'ex-k', text: '在行动链中的位置' }), el('p', { text: chain }));
    const content = $('src-content');
    if (!entry.text) { content.textContent = '（二进制文件，' + entry.bytes + ' bytes；请使用“下载此文件”。）'; return; }
    content.textContent = '读取中…';
    try {
      const response = await fetch('/api/react-agent/example/file?path=' + encodeURIComponent(path).replace(/%2F/g, '/'), { cache: 'no-store' });
      const text = await response.text();
      if (token !== srcToken) return;
      if (!response.ok) throw new Error(text);
      content.textContent = text; // textContent: the file is shown as text, never parsed as HTML
    } catch (e) {
      if (token === srcToken) content.textContent = '无法读取文件：' + e.message;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Wiring
  // ------------------------------------------------------------------------------------------

  function init() {
    takeOperatorToken();  // first: the link's fragment names the runner and its token
    renderExp1();
    $('exp1-prev').addEventListener('click', () => { if (exp1Index > 0) { exp1Index -= 1; renderExp1(); } });
    $('exp1-next').addEventListener('click', () => { if (exp1Index < EXP1.length - 1) { exp1Index += 1; renderExp1(); } });
    renderExp2();
    $('exp2-validate').addEventListener('click', () => {
      const item = EXP2[exp2Index];
      validateWithRunner(item.decision.tool, item.decision.arguments, '');
    });
    buildBudgetInputs();
    $('runner-url').addEventListener('input', onRunnerUrlInput);
    $('runner-check').addEventListener('click', checkRunner);
    for (const id of ['model-path', 'model-device', 'model-dtype']) {
      $(id).addEventListener(id === 'model-path' ? 'input' : 'change', () => {
        if (S.inspect) resetInspect('模型设置已改变，请重新检查。');
      });
    }
    $('model-inspect').addEventListener('click', inspectModel);
    $('budget-preset').addEventListener('click', applyPreset);
    $('pack-select').addEventListener('change', showPackGoal);
    $('run-start').addEventListener('click', startRun);
    $('run-cancel').addEventListener('click', cancelRun);
    $('run-export').addEventListener('click', exportTrace);
    $('run-explain-btn').addEventListener('click', explainRun);
    $('approval-approve').addEventListener('click', () => answerApproval('approve'));
    $('approval-deny').addEventListener('click', () => answerApproval('deny'));
    $('followup-send').addEventListener('click', sendFollowup);
    $('followup-input').addEventListener('input', () => { S.followupError = ''; renderFollowup(S.run); });
    $('followup-input').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendFollowup(); }
    });
    renderMetrics(null);
    onRunnerUrlInput();
    updateStartButton();
    loadManifest();
  }

  // Exposed for the browser tests and for curious readers in the console.
  window.ReactAgentPage = { normalizeRunnerUrl, stripHidden, deriveStages, explainFor, pendingApproval, showApproval,
    visibleNodes, operatorToken };
  document.addEventListener('DOMContentLoaded', init);
})();
