// Heading ids as an MDX site (rehype-slug / github-slugger) renders them; one page a line of JSON.
import { compile } from '@mdx-js/mdx'
import remarkGfm from 'remark-gfm'
import remarkDirective from 'remark-directive'
import rehypeSlug from 'rehype-slug'
import { visit } from 'unist-util-visit'
import { toString } from 'hast-util-to-string'
import readline from 'node:readline'

const rl = readline.createInterface({ input: process.stdin })
for await (const line of rl) {
  const { path, body } = JSON.parse(line)
  const found = []
  const collect = () => (tree) => {
    visit(tree, 'element', (node) => {
      if (/^h[1-6]$/.test(node.tagName)) found.push([Number(node.tagName[1]), toString(node), node.properties.id ?? null])
    })
  }
  let error = null
  try {
    await compile(body, { remarkPlugins: [remarkGfm, remarkDirective], rehypePlugins: [rehypeSlug, collect] })
  } catch (e) { error = String(e.message || e).split('\n')[0] }
  process.stdout.write(JSON.stringify({ path, headings: found, error }) + '\n')
}
