// A table body that renders only the rows in view (plus a margin), so a 13,000-row operator table
// shows and re-sorts in milliseconds: spacer rows stand for the rest and keep the scrollbar true.

// The rows [first, last) to render for a scroll position; rows are `rowHeight` px tall.
export function visibleRows(scrollTop: number, viewportHeight: number, rowHeight: number, count: number,
  overscan = 10): { first: number; last: number } {
  const height = Math.max(1, rowHeight);
  const first = Math.max(0, Math.floor(scrollTop / height) - overscan);
  const last = Math.min(count, Math.ceil((scrollTop + Math.max(0, viewportHeight)) / height) + overscan);
  return { first, last: Math.max(first, last) };
}

export class VirtualRows<T> {
  private rows: readonly T[] = [];
  private rowHeight = 26; // measured from the first row drawn
  private frame = 0;
  private drawn = { first: -1, last: -1 };

  // scroller: the element that scrolls (its height bounds the rows drawn); body: the tbody to fill;
  // columns: the number of cells in a row (for the spacers); html: one row's <tr>.
  constructor(
    private readonly scroller: HTMLElement,
    private readonly body: HTMLTableSectionElement,
    private readonly columns: number,
    private readonly html: (row: T, index: number) => string,
  ) {
    scroller.addEventListener('scroll', () => {
      if (this.frame) return;
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render();
      });
    });
  }

  setRows(rows: readonly T[]): void {
    this.rows = rows;
    this.drawn = { first: -1, last: -1 };
    this.render();
  }

  get count(): number {
    return this.rows.length;
  }

  // Rows currently in the DOM (for tests).
  get rendered(): { first: number; last: number } {
    return { ...this.drawn };
  }

  render(): void {
    const top = Math.max(0, this.scroller.scrollTop - this.body.offsetTop);
    // The scroller grows with its rows up to its max-height: until drawn it is as short as its header, so
    // the window's height bounds what can be in view.
    const range = visibleRows(top, Math.max(this.scroller.clientHeight, window.innerHeight), this.rowHeight, this.rows.length);
    if (range.first === this.drawn.first && range.last === this.drawn.last) return;
    this.drawn = range;
    const spacer = (rows: number) => rows > 0
      ? `<tr class="spacer" aria-hidden="true"><td colspan="${this.columns}" style="height:${rows * this.rowHeight}px;padding:0;border:0"></td></tr>`
      : '';
    let html = spacer(range.first);
    for (let i = range.first; i < range.last; i++) html += this.html(this.rows[i], i);
    html += spacer(this.rows.length - range.last);
    this.body.innerHTML = html;
    const sample = this.body.querySelector<HTMLElement>('tr:not(.spacer)');
    if (sample && sample.offsetHeight > 0 && Math.abs(sample.offsetHeight - this.rowHeight) > 0.5) {
      this.rowHeight = sample.offsetHeight;
      this.drawn = { first: -1, last: -1 };
      this.render();
    }
  }
}
