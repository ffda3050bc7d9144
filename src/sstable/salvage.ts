/**
 * What can be read of a damaged table (LevelDB's RepairDB reads tables the same way): the
 * entries of every data block that passes its checksum and parses, in order, and the blocks
 * that do not, with the keys they may have held. A table whose footer or index does not read
 * has no blocks to go by: it is unreadable whole. Pure.
 */
import { checkInternalKey, compareInternalKeys } from '../common/internal-key.js';
import { Block } from './block.js';
import { decodeHandle, readBlock, readFooter } from './format.js';

export interface LostBlock {
  /** Where the block is in the table, and its size without the trailer. */
  offset: number;
  size: number;
  /** Its keys were after `after` (the block before's last key; none for the first) and at most `upTo`. */
  after?: Buffer;
  upTo: Buffer;
  why: string;
}

export interface Salvaged {
  /** Entries of the blocks that read, in order: internal keys and values (copies). */
  entries: Array<[Buffer, Buffer]>;
  blocks: number;
  lost: LostBlock[];
  /** Set when the footer or the index does not read (or stops reading): no entry after those kept can be found. */
  unreadable?: string;
  /** Set when the filter block does not read: no entry is lost, but the table must be written again. */
  filterDamaged?: string;
}

export function salvageTable(bytes: Buffer, name: string): Salvaged {
  let index: Block;
  let filterDamaged: string | undefined;
  try {
    const footer = readFooter(bytes, name);
    index = new Block(readBlock(bytes, footer.index, name, 'index'), `${name} index block`);
    try {
      readBlock(bytes, footer.filter, name, 'filter');
    } catch (err) {
      filterDamaged = (err as Error).message;
    }
  } catch (err) {
    return { entries: [], blocks: 0, lost: [], unreadable: (err as Error).message };
  }
  const out: Salvaged = { entries: [], blocks: 0, lost: [], ...(filterDamaged !== undefined ? { filterDamaged } : {}) };
  let after: Buffer | undefined;
  try {
    const it = index.iterator(compareInternalKeys);
    for (it.first(); it.valid; it.next(), out.blocks++) {
      const upTo = Buffer.from(it.key);
      const h = decodeHandle(it.value, `${name} index entry ${out.blocks}`);
      const kept: Array<[Buffer, Buffer]> = [];
      try {
        const block = new Block(readBlock(bytes, h, name, 'data'), name, h.offset);
        const b = block.iterator(compareInternalKeys);
        for (b.first(); b.valid; b.next()) {
          checkInternalKey(b.key, `${name} data block at offset ${h.offset}`);
          const prev = kept.length > 0 ? kept[kept.length - 1][0] : after;
          if ((prev && compareInternalKeys(prev, b.key) >= 0) || compareInternalKeys(b.key, upTo) > 0) {
            throw new Error(`keys out of order in the data block at offset ${h.offset}`);
          }
          kept.push([Buffer.from(b.key), Buffer.from(b.value)]);
        }
        out.entries.push(...kept);
      } catch (err) {
        out.lost.push({ offset: h.offset, size: h.size, ...(after ? { after } : {}), upTo, why: (err as Error).message });
      }
      after = upTo;
    }
  } catch (err) {
    // The index itself parsed badly past this point: what follows cannot be found.
    return { ...out, unreadable: (err as Error).message };
  }
  return out;
}
