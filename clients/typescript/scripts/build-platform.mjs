#!/usr/bin/env node
// Builds the server packages @sbxdb/server-<platform>-<arch>, each holding
// the sbxdb binary cross-compiled from this checkout (CGO_ENABLED=0,
// GOOS/GOARCH), as esbuild ships its binaries: one package per platform,
// with os and cpu fields, that @sbxdb/tanstack-ai lists as optional
// dependencies, so that npm installs the one of the host's platform.
//
//   node scripts/build-platform.mjs [--out DIR] [--targets linux-x64,...] [--pack]
//
// Without --targets it builds every platform the engine builds for. The
// package directories go under DIR (default build/npm), never committed.
// With --pack it also runs `npm pack` in each, and packs @sbxdb/tanstack-ai
// itself with the optionalDependencies on the server packages (pinned to
// its own version), as a release publishes them: the tarballs land in DIR.
// The committed package.json does not list them, since a dependency that
// is not published could not be installed (npm ci) in this checkout.

import { execFileSync } from 'node:child_process'
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const pkgDir = resolve(here, '..')
const repoRoot = resolve(pkgDir, '..', '..')
const main = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'))

/**
 * Every platform the engine builds for: Node's platform-arch, and Go's
 * GOOS/GOARCH. Windows is not among them: the engine's restore uses
 * O_DIRECTORY and O_NOFOLLOW, which GOOS=windows lacks.
 */
export const platforms = {
  'linux-x64': { goos: 'linux', goarch: 'amd64', os: 'linux', cpu: 'x64' },
  'linux-arm64': { goos: 'linux', goarch: 'arm64', os: 'linux', cpu: 'arm64' },
  'darwin-arm64': { goos: 'darwin', goarch: 'arm64', os: 'darwin', cpu: 'arm64' },
  'darwin-x64': { goos: 'darwin', goarch: 'amd64', os: 'darwin', cpu: 'x64' },
}

function parseArgs(argv) {
  const opts = { out: join(pkgDir, 'build', 'npm'), targets: Object.keys(platforms), pack: false }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--out') opts.out = resolve(argv[++i])
    else if (a === '--targets') opts.targets = argv[++i].split(',').filter(Boolean)
    else if (a === '--pack') opts.pack = true
    else throw new Error(`build-platform: unknown argument ${a}`)
  }
  for (const t of opts.targets) {
    if (!(t in platforms)) throw new Error(`build-platform: unknown target ${t}; want one of ${Object.keys(platforms).join(', ')}`)
  }
  return opts
}

/** Builds the package directory of `target` under `out` and returns it. */
function buildTarget(target, out) {
  const p = platforms[target]
  const name = `@sbxdb/server-${target}`
  const dir = join(out, `server-${target}`)
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(join(dir, 'bin'), { recursive: true })
  const exe = p.goos === 'windows' ? 'sbxdb.exe' : 'sbxdb'
  execFileSync('go', ['build', '-trimpath', '-o', join(dir, 'bin', exe), './cmd/sbxdb'], {
    cwd: repoRoot,
    stdio: 'inherit',
    env: { ...process.env, GOOS: p.goos, GOARCH: p.goarch, CGO_ENABLED: '0' },
  })
  const manifest = {
    name,
    version: main.version,
    description: `The sbxdb server binary for ${p.os} ${p.cpu}, started by @sbxdb/tanstack-ai's open()`,
    os: [p.os],
    cpu: [p.cpu],
    files: ['bin'],
    preferUnplugged: true,
  }
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`)
  writeFileSync(join(dir, 'README.md'),
    `# ${name}\n\nThe \`sbxdb\` binary (\`bin/${exe}\`) for ${p.os} ${p.cpu}, built from sbxdb ${main.version} ` +
    'with CGO_ENABLED=0. Installed as an optional dependency of `@sbxdb/tanstack-ai`, whose `open({ dir })` starts it.\n')
  console.log(`built ${name} in ${dir}`)
  return dir
}

/** `npm pack` of `dir` into `out`; returns the tarball's path. */
function pack(dir, out) {
  const file = execFileSync('npm', ['pack', '--silent', '--pack-destination', out], { cwd: dir, encoding: 'utf8' }).trim().split('\n').pop()
  console.log(`packed ${join(out, file)}`)
  return join(out, file)
}

/**
 * Packs @sbxdb/tanstack-ai as published: dist/ built (prepare), and
 * optionalDependencies on every server package at the package's version.
 */
function packMain(out) {
  const stage = join(out, 'tanstack-ai')
  rmSync(stage, { recursive: true, force: true })
  mkdirSync(stage, { recursive: true })
  execFileSync('npm', ['run', 'build'], { cwd: pkgDir, stdio: 'inherit' })
  for (const f of ['README.md', 'dist', 'src']) cpSync(join(pkgDir, f), join(stage, f), { recursive: true })
  const manifest = { ...main, scripts: undefined, devDependencies: undefined }
  manifest.optionalDependencies = Object.fromEntries(Object.keys(platforms).map((t) => [`@sbxdb/server-${t}`, main.version]))
  writeFileSync(join(stage, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`)
  return pack(stage, out)
}

const opts = parseArgs(process.argv.slice(2))
mkdirSync(opts.out, { recursive: true })
const dirs = opts.targets.map((t) => buildTarget(t, opts.out))
if (opts.pack) {
  for (const d of dirs) pack(d, opts.out)
  packMain(opts.out)
}
