// Checks what the user picked for an upload before anything is sent: either the files of one profile
// output directory (a folder picked with <input webkitdirectory>, docs/formats.md) or one executable
// and its instruction trace (.neff + .ntff). The server checks again; this only turns the common
// mistakes into messages that say what to pick instead.

// What the upload needs of a browser File (tests pass plain objects).
export interface PickedFile {
  name: string;
  size: number;
  webkitRelativePath?: string;
}

export type UploadKind = 'directory' | 'pair';

export type UploadPlan<F extends PickedFile> =
  | { ok: true; kind: UploadKind; files: F[]; bytes: number; suggestedName: string }
  | { ok: false; error: string };

// The server's rule for profile names (src/server/profile_store.cpp).
export const MAX_NAME_LENGTH = 200;
const NAME_PATTERN = /^[A-Za-z0-9_\-.+@]+$/;

export function profileNameError(name: string): string | undefined {
  if (name === '') return 'Enter a name for the uploaded profile.';
  if (name.length > MAX_NAME_LENGTH) return `The name is ${name.length} characters long; use at most ${MAX_NAME_LENGTH}.`;
  if (name.startsWith('.')) return `'${name}' starts with a dot; profile names may not.`;
  if (!NAME_PATTERN.test(name)) return `'${name}' is not a profile name: use letters, digits and -_.+@ only.`;
  return undefined;
}

// A name the server accepts, derived from a folder or file name ("my run/" -> "my_run").
export function suggestName(source: string): string {
  const cleaned = source.replace(/[^A-Za-z0-9_\-.+@]/g, '_').replace(/^\.+/, '').slice(0, MAX_NAME_LENGTH);
  return cleaned || 'profile';
}

// `files` as the folder picker gives them: webkitRelativePath = "<picked folder>/<file>".
export function planDirectoryUpload<F extends PickedFile>(files: readonly F[]): UploadPlan<F> {
  if (files.length === 0) return { ok: false, error: 'The folder is empty: pick a profile output directory.' };
  const top = (files[0].webkitRelativePath ?? '').split('/')[0] ?? '';
  const nested = files.filter((f) => (f.webkitRelativePath ?? f.name).split('/').length > 2);
  if (nested.length > 0) {
    return {
      ok: false,
      error: `'${top}' holds subfolders (${nested[0].webkitRelativePath}); pick one profile output directory, ` +
        'the folder that holds manifest.json, not a folder of profiles.',
    };
  }
  if (!files.some((f) => f.name === 'manifest.json')) {
    return {
      ok: false,
      error: `'${top || files[0].name}' has no manifest.json, so it is not a profile output directory. Pick the ` +
        'folder the profiler wrote, or use "Executable + trace" for a .neff and .ntff pair.',
    };
  }
  const duplicate = firstDuplicate(files.map((f) => f.name));
  if (duplicate) return { ok: false, error: `Two files are named '${duplicate}'.` };
  return { ok: true, kind: 'directory', files: [...files], bytes: totalBytes(files), suggestedName: suggestName(top) };
}

// An executable + instruction-trace pair: exactly one .neff and one .ntff.
export function planPairUpload<F extends PickedFile>(files: readonly F[]): UploadPlan<F> {
  const neffs = files.filter((f) => f.name.endsWith('.neff'));
  const ntffs = files.filter((f) => f.name.endsWith('.ntff'));
  const other = files.filter((f) => !f.name.endsWith('.neff') && !f.name.endsWith('.ntff'));
  if (other.length > 0) {
    return { ok: false, error: `'${other[0].name}' is neither a .neff nor a .ntff; pick one of each.` };
  }
  if (neffs.length !== 1 || ntffs.length !== 1) {
    return {
      ok: false,
      error: `Pick exactly one executable (.neff) and one instruction trace (.ntff); got ${neffs.length} .neff and ` +
        `${ntffs.length} .ntff.`,
    };
  }
  const base = neffs[0].name.replace(/\.neff$/, '').replace(/^neff_/, '');
  return { ok: true, kind: 'pair', files: [neffs[0], ntffs[0]], bytes: totalBytes(files), suggestedName: suggestName(base) };
}

function totalBytes(files: readonly PickedFile[]): number {
  return files.reduce((sum, f) => sum + f.size, 0);
}

function firstDuplicate(names: readonly string[]): string | undefined {
  const seen = new Set<string>();
  for (const name of names) {
    if (seen.has(name)) return name;
    seen.add(name);
  }
  return undefined;
}

// "12.5 MiB of 40.0 MiB (31%)"
export function progressText(sent: number, total: number, format: (bytes: number) => string): string {
  if (total <= 0) return `${format(sent)} sent`;
  return `${format(sent)} of ${format(total)} (${Math.floor((100 * sent) / total)}%)`;
}
