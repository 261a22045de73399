// A real OpenID Connect provider on loopback for tests/portal/test_sso_flow.py: the certified `oidc-provider`
// (https://github.com/panva/node-oidc-provider) with one confidential client and the accounts of a JSON file.
//
//   node provider.mjs   (env: ACCOUNTS_FILE, CLIENT_ID, CLIENT_SECRET, REDIRECT_URI; PORT, default 0: any free one)
//
// Prints "issuer <url>" once it listens. The accounts file ({"<login>": {"password", "email", "groups": [...]}})
// is read again at every sign-in and claims request, so a test that edits it has moved the user between groups
// as an administrator would in Keycloak or Okta. The interaction (login form, then consent) follows the library's
// own example (example/routes/express.js): a first-party client is granted what it asked without a consent
// screen, as Keycloak does with "Consent required" off.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const env = (name, fallback) => process.env[name] ?? fallback;
const accounts = () => JSON.parse(readFileSync(env('ACCOUNTS_FILE'), 'utf8'));

let provider;
const server = createServer((req, res) => {
  const match = req.url.match(/^\/interaction\/([\w-]+)$/);
  if (match) {
    interaction(req, res).catch((err) => {
      res.statusCode = 500;
      res.end(String(err));
    });
  } else {
    provider.callback()(req, res);
  }
});

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginForm(res, uid, message) {
  res.statusCode = message ? 401 : 200;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.end(`<!doctype html><title>Test IdP sign-in</title>${message ? `<p role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}">
<input name="login" autocomplete="username"><input name="password" type="password"><button>Sign in</button></form>`);
}

async function body(req) {
  let data = '';
  for await (const chunk of req) data += chunk;
  return new URLSearchParams(data);
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params } = details;
  if (prompt.name === 'login') {
    if (req.method !== 'POST') return loginForm(res, uid);
    const form = await body(req);
    const account = accounts()[form.get('login')];
    if (!account || account.password !== form.get('password')) return loginForm(res, uid, 'Invalid credentials');
    return provider.interactionFinished(req, res, { login: { accountId: form.get('login') } });
  }
  // consent: grant the scopes and claims the client asked for.
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: details.grantId ? {} : { grantId } }, {
    mergeWithLastSubmission: true,
  });
}

server.listen(Number(env('PORT', '0')), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const signingKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  provider = new Provider(issuer, {
    clients: [
      {
        client_id: env('CLIENT_ID', 'microcosm'),
        client_secret: env('CLIENT_SECRET', 'microcosm-test-secret'),
        redirect_uris: [env('REDIRECT_URI', 'http://testserver/oidc/callback/')],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [{ ...signingKey, kid: 'test-key', use: 'sig', alg: 'RS256' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name'],
      groups: ['groups'],
    },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(ctx, sub) {
      if (!(sub in accounts())) return undefined;
      return {
        accountId: sub,
        async claims() {
          const account = accounts()[sub] ?? {};
          return {
            sub,
            preferred_username: account.username ?? sub,
            name: account.name ?? sub,
            email: account.email,
            email_verified: true,
            groups: account.groups ?? [],
          };
        },
      };
    },
  });
  console.log(`issuer ${issuer}`);
});

const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
